# -*- test-case-name: tests.test_sources_maildir -*-
"""
The files of one Maildir folder: the scan of its C{cur/} and C{new/}, and
where each message's file is (taken out of the Maildir source's module,
which grew too big to read).
"""

from __future__ import annotations

import os
import sys
from itertools import islice
from typing import Iterator

from imapmig.sources.local import Irregular, carriedName
from imapmig.sources.maildir.names import splitName
from imapmig.sources.maildir.opened import SUBDIRS, Located, OpenFolder

__all__ = ["FolderFiles", "Scanned", "scanFolder", "scanInTurns"]

# (key, unique part, index into SUBDIRS, file name, flag letters or None,
# what it is if not a regular file)
Scanned = tuple[str, str, int, str, str | None, Irregular | None]


def scanFolder(folder: OpenFolder) -> list[Scanned]:
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
    scanned: list[Scanned] = []
    for _ in scanInTurns(folder, scanned):
        pass
    return scanned


def scanInTurns(folder: OpenFolder, scanned: list[Scanned], turn: int = sys.maxsize) -> Iterator[None]:
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
        with os.scandir(fd) as entries:
            while _scanSubdirectory(folder, index, islice(entries, turn), first, duplicates) == turn:
                yield None
    if not duplicates:
        scanned.extend(first.values())
        return
    scanned.extend(s for s in first.values() if s[0] not in duplicates)
    scanned.extend(_keyedApart(duplicates))


def _scanSubdirectory(
    folder: OpenFolder,
    index: int,
    entries: Iterator[os.DirEntry[str]],
    first: dict[str, Scanned],
    duplicates: dict[str, list[Scanned]],
) -> int:
    """
    Scan C{entries} of C{cur/} or C{new/} into C{first} (per unique part, its first
    file) and C{duplicates} (per unique part found more than once, all its
    files).

    @param index: the subdirectory's index into L{SUBDIRS}.
    @return: how many entries were read.
    """
    # Once per file, so inline, splitName's common case (a name with
    # C{:2,}) too: a regular file costs no call (a call costs about 500
    # instructions).
    read = 0
    letters: str | None
    for entry in entries:
        read += 1
        name = entry.name
        if name[0] == ".":
            continue
        irregular = None
        if not entry.is_file(follow_symlinks=False):
            irregular = folder.classify(index, entry)
            if irregular is None:
                continue
        colon = name.find(":")
        if colon > 0 and name[colon + 1 : colon + 3] == "2,":
            unique, letters = name[:colon], name[colon + 3 :]
        else:
            unique, letters = splitName(name)
        if not unique.isascii() or "%" in unique:
            unique = carriedName(unique)
        scanned = (unique, unique, index, name, letters, irregular)
        if unique in first:
            duplicates.setdefault(unique, [first[unique]]).append(scanned)
        else:
            first[unique] = scanned
    return read


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
        for _, _, index, name, letters, irregular in group[1:]:
            key = f"{unique}/{SUBDIRS[index]}"
            if key in taken:
                key = f"{key}/{carriedName(name)}"
            taken.add(key)
            result.append((key, unique, index, name, letters, irregular))
    return result


class FolderFiles:
    """
    Where the message files of one folder are: per key, the file's name in
    C{cur/} or C{new/} (the names the listing already holds, no paths), and
    what the entries that are not regular files are.

    @ivar relative: the folder's directory, relative to the Maildir.
    """

    __slots__ = ("relative", "_names", "_irregular")

    def __init__(self, relative: str, scanned: list[Scanned]) -> None:
        self.relative = relative
        self._names: tuple[dict[str, str], ...] = tuple({} for _ in SUBDIRS)
        self._irregular: dict[str, Irregular] = {}
        self.add(scanned)

    def add(self, scanned: list[Scanned]) -> None:
        """
        Where more files are (a listing's next turn).
        """
        for key, _, index, name, _, irregular in scanned:
            self._names[index][key] = name
            if irregular is not None:
                self._irregular[key] = irregular

    def locate(self, key: str) -> Located | None:
        """
        The subdirectory and name of the file of C{key}, and what it is if
        not a regular file; L{None} if it was not listed.
        """
        for index, names in enumerate(self._names):
            name = names.get(key)
            if name is not None:
                return index, name, self._irregular.get(key)
        return None
