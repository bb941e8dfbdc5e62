# -*- test-case-name: tests.test_sources_maildir,tests.test_sources_maildir_held -*-
"""
A Maildir folder's C{cur/} and C{new/}, opened beneath the Maildir for one
listing or one batch of reads (taken out of the Maildir source's module,
which grew too big to read).
"""

from __future__ import annotations

import errno
import os
from collections import OrderedDict
from typing import Callable, Hashable, Sequence

from imapmig.errors import LeavesTree, SourceError
from imapmig.mail.message import MessageBody, ReadBodies, SourceMessage, UnreadableMessage
from imapmig.sources.local import (
    Entry,
    Irregular,
    carriedName,
    describe,
    followEntry,
    linkProblem,
    openTree,
)
from imapmig.sources.messagefile import (
    LARGE_MESSAGE,
    Table,
    readListedFile,
    readListedFiles,
    readMessageFile,
    readOpenFile,
)

__all__ = ["HELD_FOLDERS", "SUBDIRS", "HeldFolders", "Located", "OpenFolder"]

# Where a listed file is: (index into SUBDIRS, file name, what it is if not
# a regular file)
Located = tuple[int, str, Irregular | None]

# Scanned in this order: for duplicate unique names, cur/ wins the plain key.
SUBDIRS = ("cur", "new")


class OpenFolder:
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
        self.tree = openTree(root, "cannot read the Maildir")
        self.shown = carriedName(self.tree.path(relative))
        # Joined once: a path per message would cost more than its open.
        self._shownDirectories = tuple(os.path.join(self.shown, subdir) for subdir in SUBDIRS)
        self.descriptors: list[int | None] = []
        self._openSubdirectories()

    def _openSubdirectories(self) -> None:
        """
        Open C{cur/} and C{new/}, or close everything.

        @raise SourceError: one cannot be opened.
        """
        try:
            for subdir in SUBDIRS:
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
        except (LeavesTree, OSError) as e:
            why = self._whyNot(subdir, e)
        raise SourceError(f"cannot list the Maildir folder {self.shown}: {why}")

    def _whyNot(self, subdir: str, error: LeavesTree | OSError) -> str:
        """
        Why C{cur/} or C{new/} cannot be opened, for the admin.
        """
        if isinstance(error, LeavesTree):
            return linkProblem(carriedName(os.path.join(self.tree.root, error.path)), error)
        if isinstance(error, NotADirectoryError):
            return f"{subdir}/ is not a directory"
        return "symbolic link loop" if error.errno == errno.ELOOP else describe(error)

    @property
    def found(self) -> bool:
        """
        Whether C{cur/} or C{new/} exists.
        """
        return any(fd is not None for fd in self.descriptors)

    def __enter__(self) -> OpenFolder:
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

    def classify(self, index: int, entry: Entry) -> Irregular | None:
        """
        What an entry of subdirectory C{index} that is not a regular file
        is (see L{followEntry}).

        @return: L{None} if it is gone.
        """
        shown = os.path.join(self.shownDirectory(index), carriedName(entry.name))
        relative = os.path.join(self.relative, SUBDIRS[index], entry.name)
        try:
            return followEntry(self.tree, relative, shown, entry)
        except FileNotFoundError:
            return None

    def readListed(
        self,
        messages: Sequence[SourceMessage],
        locate: Callable[[str], Located | None] | Table,
        bodies: ReadBodies,
    ) -> int:
        """
        Read the files of C{messages} in the common case, appending each
        body and its facts to C{bodies} (L{readListedFiles}: one call for
        the batch where the C extension is built).

        @param locate: where the file of a message key is (a listing's
            L{Table}, looked up with no call per message).
        @return: how many were not read: L{NOT_READ} stands in their place,
            for L{read} to read.
        """
        return readListedFiles(messages, locate, self.descriptors, bodies)

    def read(self, located: Located, size: int) -> MessageBody | None:
        """
        Read a listed file, as L{readMessageFile} does (L{None} when it is
        gone).

        @param located: where it is, and what the listing found it to be
            if not a regular file.
        @param size: its size as listed.
        """
        index, name, irregular = located
        if irregular is not None:
            return self._readIrregular(index, name, irregular, size)
        fd = self.descriptors[index]
        if fd is None:
            return None
        if 0 < size <= LARGE_MESSAGE:
            # The common case: one open, read, close.
            read = readListedFile(name, size, fd)
            if read is not None:
                return read[0]
        return readMessageFile(name, size, fd, self._shownDirectories[index])

    def _readIrregular(
        self, index: int, name: str, irregular: Irregular, size: int
    ) -> MessageBody | None:
        """
        L{read} an entry that is not a regular file: the file a symbolic
        link leads to, or the reason it is not read.
        """
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


class HeldFolders:
    """
    Maildir folders held open from one read step to the next (see
    L{imapmig.sources.maildir.MaildirSource.readBodies}): a step of a folder
    opened the Maildir, the folder's directory twice, C{cur/} and C{new/},
    and closed them all (ten system calls a step, about 0.3 a message of a
    realistic run, and an L{OpenFolder} made in Python), where a folder held
    costs none.

    At most C{limit} folders are held across every source of the process
    (each holds three descriptors: the Maildir, C{cur/} and C{new/}), the
    one used least recently closed first: 500 jobs at once hold no more,
    and a job whose folder was closed so opens it again at its next step,
    as every step did before.

    @ivar limit: how many folders are held at most.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: OrderedDict[tuple[Hashable, str], OpenFolder] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def take(self, owner: Hashable, key: str) -> OpenFolder | None:
        """
        The folder C{key} of C{owner}, if held: no longer held (the caller
        reads with it, then L{hold}s or closes it).
        """
        return self._held.pop((owner, key), None)

    def hold(self, owner: Hashable, key: str, folder: OpenFolder) -> None:
        """
        Hold C{folder} (C{key} of C{owner}) for the next step, closing the
        folder used least recently if more than L{limit} are held (one
        already held as C{key} of C{owner} is closed).
        """
        previous = self._held.pop((owner, key), None)
        if previous is not None and previous is not folder:
            previous.close()
        self._held[(owner, key)] = folder
        while len(self._held) > self.limit:
            _, oldest = self._held.popitem(last=False)
            oldest.close()

    def release(self, owner: Hashable, key: str | None = None) -> None:
        """
        Close the folder C{key} of C{owner} if held; every folder of
        C{owner} without C{key}.
        """
        if key is not None:
            folder = self._held.pop((owner, key), None)
            if folder is not None:
                folder.close()
            return
        for held in [held for held in self._held if held[0] is owner]:
            self._held.pop(held).close()


HELD_FOLDERS = HeldFolders(32)
"""
The folders held open by every Maildir source of the process: 32 at most,
96 descriptors.
"""
