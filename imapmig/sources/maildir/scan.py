# -*- test-case-name: tests.test_sources_maildir -*-
"""
The files of one Maildir folder: the scan of its C{cur/} and C{new/}, and
where each message's file is (taken out of the Maildir source's module,
which grew too big to read).
"""

from __future__ import annotations

import os
import stat
import sys
from functools import partial
from itertools import islice
from typing import Callable, Iterator, Protocol

from imapmig.sources.local import Irregular, carriedName, sizeAndMtimePython
from imapmig.sources.maildir.names import nameFieldsPython, splitName
from imapmig.sources.messagefile import Table
from imapmig.sources.maildir.opened import SUBDIRS, Located, OpenFolder

__all__ = [
    "Directory",
    "DirectoryPython",
    "addFiles",
    "addFilesPython",
    "FolderFiles",
    "Scanned",
    "scanFolder",
    "scanInTurns",
    "scannedOf",
    "scannedOfPython",
]

# (key, unique part, index into SUBDIRS, file name, flag letters or None,
# what it is if not a regular file, date, size): the date and size its
# name gives, else its status gives where the scan took it; None where
# neither says.
Scanned = tuple[str, str, int, str, str | None, Irregular | None, float | None, int | None]

# What the scan does with an entry that is not a regular file: its name and
# whether it is a symbolic link (None: not known).
Classify = Callable[[str, bool | None], Scanned | None]


def scanFolder(folder: OpenFolder, status: bool = False) -> list[Scanned]:
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
    system call beyond the directory's reading, but its status where
    C{status} asks for it and its name lacks a date or a size.

    @param folder: the folder, open.
    @param status: whether to take the status of the regular files whose
        name lacks a date or a size (a listing; a rescan needs names only).
    @return: the files, in no particular order.
    @raise OSError: C{cur/} or C{new/} cannot be read.
    """
    scanned: list[Scanned] = []
    for _ in scanInTurns(folder, scanned, status=status):
        pass
    return scanned


def scanInTurns(
    folder: OpenFolder, scanned: list[Scanned], turn: int = sys.maxsize, status: bool = True
) -> Iterator[None]:
    """
    L{scanFolder}, in turns: yields after each C{turn} entries read from
    C{cur/} or C{new/} while more may follow (a listing of a large folder
    lets the reactor run between turns), and puts the files in
    C{scanned} once done.

    @raise OSError: C{cur/} or C{new/} cannot be read.
    """
    first: dict[str, Scanned] = {}
    duplicates: dict[str, list[Scanned]] = {}
    for index, fd in enumerate(folder.descriptors):
        if fd is None:
            continue
        classify = partial(_irregularEntry, folder, index, fd)
        with Directory(fd) as directory:
            # One call a turn (in C where the extension was built): the
            # entries read, each regular file's status taken where its name
            # lacks a date or a size, all in one pass.
            while directory.scan(index, turn, carriedName, classify, first, duplicates, status) == turn:
                yield None
    if not duplicates:
        scanned.extend(first.values())
        return
    scanned.extend(s for s in first.values() if s[0] not in duplicates)
    scanned.extend(_keyedApart(duplicates))


class DirectoryPython:
    """
    One subdirectory (C{cur/} or C{new/}) of a Maildir folder, read a turn
    of entries at a time: the reference of the C extension's C{Directory},
    and its stand-in where it was not built.  A context manager: closed on
    leaving.
    """

    def __init__(self, fd: int) -> None:
        """
        @param fd: the subdirectory, open (read from its start through a
            duplicate, as C{os.scandir(fd)} reads it).
        """
        self._entries = os.scandir(fd)
        self._fd = fd

    def __enter__(self) -> DirectoryPython:
        return self

    def __exit__(self, *excInfo: object) -> None:
        self.close()

    def close(self) -> None:
        """
        Close the directory.
        """
        self._entries.close()

    def scan(
        self,
        index: int,
        turn: int,
        carry: Callable[[str], str],
        classify: Classify,
        first: dict[str, Scanned],
        duplicates: dict[str, list[Scanned]],
        status: bool,
        /,
    ) -> int:
        """
        Read up to C{turn} entries into C{first} (per unique part, its
        first file) and C{duplicates} (per unique part found more than
        once, all its files): a regular file's tuple by L{scannedOfPython},
        its date and size from its status where its name lacks them and
        C{status} is true; any other entry's by C{classify}; dotfiles
        skipped.

        @param index: the subdirectory's index into L{SUBDIRS}.
        @return: how many entries were read.
        """
        read = 0
        scanned: Scanned | None
        for entry in islice(self._entries, turn):
            read += 1
            name = entry.name
            if name.startswith("."):
                continue
            if entry.is_file(follow_symlinks=False):
                scanned = scannedOfPython(name, index, None, carry)
                if status and scanned is not None and (scanned[6] is None or scanned[7] is None):
                    scanned = _withStatus(scanned, sizeAndMtimePython(self._fd, name))
            else:
                scanned = classify(name, None)
            if scanned is None:
                continue
            unique = scanned[0]
            if unique in first:
                duplicates.setdefault(unique, [first[unique]]).append(scanned)
            else:
                first[unique] = scanned
        return read


def _withStatus(scanned: Scanned, status: tuple[int, float] | None) -> Scanned:
    """
    C{scanned} with the date and size it lacks from C{status} (the size
    and mtime of its file, L{None}: none).
    """
    if status is None:
        return scanned
    when, size = scanned[6], scanned[7]
    return scanned[:6] + (status[1] if when is None else when, status[0] if size is None else size)


class _Entry:
    """
    An entry of C{cur/} or C{new/} that is not a regular file, as
    L{imapmig.sources.local.followEntry} looks at it (the part of
    C{os.DirEntry} it uses): its name, whether it is a symbolic link, its
    status.
    """

    __slots__ = ("name", "_fd", "_link")

    def __init__(self, fd: int, name: str, link: bool | None) -> None:
        """
        @param fd: its directory, open.
        @param link: whether it is a symbolic link; L{None}: not known.
        """
        self.name = name
        self._fd = fd
        self._link = link

    def is_symlink(self) -> bool:
        """
        Whether it is a symbolic link (as C{os.DirEntry.is_symlink}: not
        if it is gone).
        """
        if self._link is None:
            try:
                self._link = stat.S_ISLNK(self.stat(follow_symlinks=False).st_mode)
            except FileNotFoundError:
                return False
        return self._link

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        """
        Its status (of the entry itself, without C{follow_symlinks}).
        """
        return os.stat(self.name, dir_fd=self._fd, follow_symlinks=follow_symlinks)


def _irregularEntry(folder: OpenFolder, index: int, fd: int, name: str, link: bool | None) -> Scanned | None:
    """
    What the scan keeps of an entry that is not a regular file (see
    L{OpenFolder.classify}), with the date and size of the file it leads to
    where its name lacks them; L{None} for a dotfile, or an entry gone.

    @param fd: its directory, open.
    @param link: whether it is a symbolic link; L{None}: not known.
    """
    if name.startswith("."):
        return None
    irregular = folder.classify(index, _Entry(fd, name, link))
    if irregular is None:
        return None
    scanned = scannedOf(name, index, irregular, carriedName)
    if scanned is None or irregular.status is None:
        return scanned
    return _withStatus(scanned, (irregular.status.st_size, irregular.status.st_mtime))


def scannedOfPython(
    name: str, index: int, irregular: Irregular | None, carry: Callable[[str], str], /
) -> Scanned | None:
    """
    What the scan keeps of one entry of C{cur/} or C{new/}: its unique part
    (twice: the key, until duplicates are keyed apart), subdirectory index,
    name, flag letters (L{splitName}), what it is if not a regular file,
    and the date and size its unique part gives (L{nameFields});
    L{None} for a dotfile (not a message).  The reference of the C
    extension's L{scannedOf}, and its stand-in where it was not built.

    @param carry: L{carriedName}, for a unique part that is not ASCII or
        holds a C{%}.
    """
    if name.startswith("."):
        return None
    # Where the extension is not built, once per file: splitName's common
    # case (a name with C{:2,}) inline.
    colon = name.find(":")
    letters: str | None
    if colon > 0 and name[colon + 1 : colon + 3] == "2,":
        unique, letters = name[:colon], name[colon + 3 :]
    else:
        unique, letters = splitName(name)
    if not unique.isascii() or "%" in unique:
        unique = carry(unique)
    when, size = nameFieldsPython(unique)
    return (unique, unique, index, name, letters, irregular, when, size)


scannedOf: Callable[[str, int, Irregular | None, Callable[[str], str]], Scanned | None]
"""
L{scannedOfPython}, in C where the extension L{imapmig.sources._listing}
was built.
"""

class _Directory(Protocol):
    """
    What L{DirectoryPython} and the C extension's C{Directory} do.
    """

    def __enter__(self) -> _Directory: ...

    def __exit__(self, *excInfo: object) -> None: ...

    def close(self) -> None: ...

    def scan(
        self,
        index: int,
        turn: int,
        carry: Callable[[str], str],
        classify: Classify,
        first: dict[str, Scanned],
        duplicates: dict[str, list[Scanned]],
        status: bool,
        /,
    ) -> int: ...


def addFilesPython(
    scanned: list[Scanned], names: tuple[dict[str, str], ...], irregulars: dict[str, Irregular], /
) -> None:
    """
    Where C{scanned} files are: per subdirectory, each one's name by key
    (C{names}), and what those that are not regular files are
    (C{irregulars}).  The reference of the C extension's L{addFiles}, and
    its stand-in where it was not built.
    """
    for key, _, index, name, _, irregular, _, _ in scanned:
        names[index][key] = name
        if irregular is not None:
            irregulars[key] = irregular


addFiles: Callable[[list[Scanned], tuple[dict[str, str], ...], dict[str, Irregular]], None]
"""
L{addFilesPython}, in C where the extension L{imapmig.sources._listing}
was built (once per file of a listing: FolderFiles.add).
"""

Directory: Callable[[int], _Directory]
"""
L{DirectoryPython}, in C where the extension L{imapmig.sources._listing}
was built (a turn of a Maildir listing in one call: the directory read
with C{readdir}, its C{d_type} telling the regular files, the status of
those whose name lacks a date or a size taken with the GIL released once
a turn, no C{DirEntry} made).
"""

try:
    from imapmig.sources._listing import Directory, addFiles, scannedOf
except ImportError:
    Directory = DirectoryPython
    addFiles = addFilesPython
    scannedOf = scannedOfPython


def _keyedApart(duplicates: dict[str, list[Scanned]]) -> list[Scanned]:
    """
    The files sharing a unique part, with distinct deterministic keys (see
    L{scanFolder}).
    """
    result = []
    for unique, group in duplicates.items():
        group.sort(key=lambda s: (s[2], s[3]))
        taken = {unique}
        result.append(group[0])
        for _, _, index, name, letters, irregular, when, size in group[1:]:
            key = f"{unique}/{SUBDIRS[index]}"
            if key in taken:
                key = f"{key}/{carriedName(name)}"
            taken.add(key)
            result.append((key, unique, index, name, letters, irregular, when, size))
    return result


class FolderFiles:
    """
    Where the message files of one folder are: per key, the file's name in
    C{cur/} or C{new/} (the names the listing already holds, no paths), and
    what the entries that are not regular files are.

    @ivar relative: the folder's directory, relative to the Maildir.
    @ivar table: the same, as L{imapmig.sources.messagefile.readListedFiles}
        looks keys up (no call per message).
    @ivar last: the key of the listing's last message (L{None}: not
        known), whose read ends the folder's reading
        (L{imapmig.sources.maildir.MaildirSource.readBodies}).
    """

    __slots__ = ("relative", "table", "last", "_names", "_irregular")

    def __init__(self, relative: str, scanned: list[Scanned]) -> None:
        self.relative = relative
        self.last: str | None = None
        self._names: tuple[dict[str, str], ...] = tuple({} for _ in SUBDIRS)
        self._irregular: dict[str, Irregular] = {}
        self.table: Table = (self._names, self._irregular)
        self.add(scanned)

    def add(self, scanned: list[Scanned]) -> None:
        """
        Where more files are (a listing's next turn).
        """
        addFiles(scanned, self._names, self._irregular)

    def locate(self, key: str) -> Located | None:
        """
        The subdirectory and name of the file of C{key}, and what it is if
        not a regular file; L{None} if it was not listed.
        """
        # Once per message read, so without a loop (cur/ first: most files
        # are there), and the irregular entries looked up only where the
        # folder has any.
        cur, new = self._names
        index = 0
        name = cur.get(key)
        if name is None:
            name = new.get(key)
            if name is None:
                return None
            index = 1
        irregular = self._irregular
        return index, name, (irregular.get(key) if irregular else None)
