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
from typing import Callable, Iterator

from imapmig.sources.local import Irregular, carriedName
from imapmig.sources.maildir.names import splitName
from imapmig.sources.messagefile import Table
from imapmig.sources.maildir.opened import SUBDIRS, Located, OpenFolder

__all__ = ["FolderFiles", "Scanned", "scanFolder", "scanInTurns", "scannedOf", "scannedOfPython"]

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
    # Once per file, so inline: a regular file costs one call (scannedOf,
    # in C where the extension was built).
    read = 0
    scanned: Scanned | None
    for entry in entries:
        read += 1
        if entry.is_file(follow_symlinks=False):
            scanned = scannedOf(entry.name, index, None, carriedName)
        else:
            scanned = _irregularEntry(folder, index, entry)
        if scanned is None:
            continue
        unique = scanned[0]
        if unique in first:
            duplicates.setdefault(unique, [first[unique]]).append(scanned)
        else:
            first[unique] = scanned
    return read


def _irregularEntry(folder: OpenFolder, index: int, entry: os.DirEntry[str]) -> Scanned | None:
    """
    What the scan keeps of an entry that is not a regular file (see
    L{OpenFolder.classify}); L{None} for a dotfile, or an entry gone.
    """
    if entry.name.startswith("."):
        return None
    irregular = folder.classify(index, entry)
    if irregular is None:
        return None
    return scannedOf(entry.name, index, irregular, carriedName)


def scannedOfPython(
    name: str, index: int, irregular: Irregular | None, carry: Callable[[str], str], /
) -> Scanned | None:
    """
    What the scan keeps of one entry of C{cur/} or C{new/}: its unique part
    (twice: the key, until duplicates are keyed apart), subdirectory index,
    name, flag letters (L{splitName}) and what it is if not a regular file;
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
    return (unique, unique, index, name, letters, irregular)


scannedOf: Callable[[str, int, Irregular | None, Callable[[str], str]], Scanned | None]
"""
L{scannedOfPython}, in C where the extension L{imapmig.sources._listing}
was built (once per file of a Maildir listing).
"""

try:
    from imapmig.sources._listing import scannedOf
except ImportError:
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
        names, irregulars = self._names, self._irregular
        for key, _, index, name, _, irregular in scanned:
            names[index][key] = name
            if irregular is not None:
                irregulars[key] = irregular

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
