# -*- test-case-name: tests.test_sources_maildir,tests.test_sources_maildir_held -*-
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
import sys
from functools import partial
from itertools import islice
from operator import eq, itemgetter
from typing import Callable, Generator, Iterator, Sequence

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Cooperator
from zope.interface import implementer

from imapmig.errors import SourceError
from imapmig.mail.message import (
    MessageBody,
    ReadBodies,
    SourceFolder,
    SourceMessage,
    UnreadableMessage,
    listedMessage,
)
from imapmig.sources import IMessageSource
from imapmig.sources.local import (
    carriedName,
    describe,
    linksToNothing,
    originalName,
    settled,
    unreadableAll,
    utcDatetime,
)
from imapmig.sources.maildir.folders import findFolders, isFolderName
from imapmig.sources.messagefile import NOT_READ
from imapmig.sources.maildir.names import (
    flagsOf,
    readKeywords,
)
from imapmig.sources.maildir.opened import HELD_FOLDERS, SUBDIRS, HeldFolders, Located, OpenFolder
from imapmig.sources.maildir.scan import FolderFiles, Scanned, scanFolder, scanInTurns

__all__ = ["LISTING_TURN", "MaildirSource"]

# How many files listMessagesInTurns lists in one turn (a few milliseconds'
# work) before the reactor runs again.
LISTING_TURN = 2000

# Where listMessages sorts a message with no date: before any date.
_UNDATED = float("-inf")

# What listMessages sorts: (date or _UNDATED, key, flags, size), the size
# 0 when unknown.  Dates are floats, whole seconds where the name gives
# them: a list of tuples whose first items are all floats is sorted with
# C{float} comparisons, about 1,000 instructions a message fewer than
# integers of two digits (any date after 2004) compared as objects.
_Row = tuple[float, str, tuple[str, ...], int]

# The flags of one folder's info letters, worked out once per combination.
_Flags = dict[str | None, tuple[str, ...]]


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
    describes, on the calling thread, with blocking system calls.  A
    folder being read stays open from one L{readBodies} to the next (its
    C{cur/} and C{new/}: a file renamed between them is found by name
    again, a folder renamed meanwhile is still read where its directory
    went), until the listing's last message is read, the folder is listed
    again, L{close} is called, or more folders than
    L{imapmig.sources.maildir.opened.HELD_FOLDERS} allows are held.

    @ivar path: the Maildir's directory.
    """

    def __init__(self, path: str, held: HeldFolders = HELD_FOLDERS) -> None:
        """
        @param path: the Maildir's directory.
        @param held: where the folders being read are held open between
            read steps (the process's, bounded).
        """
        self.path = path
        self._held = held
        self._folderDirectories: dict[str, str] = {}
        self._messageFiles: dict[str, FolderFiles] = {}

    def close(self) -> None:
        """
        Close the folders held open between read steps (at the end of a
        job's attempt, whatever ended it: the next read opens them again).
        """
        self._held.release(self)

    def listFolders(self) -> Deferred[Sequence[SourceFolder]]:
        """
        Every folder: C{INBOX} first, then the others sorted, parents before
        children.

        @return: a Deferred that fails with L{SourceError} when the path does
            not exist, cannot be read or holds no Maildir folder at all.
        """
        return settled(self._findFolders)

    def _findFolders(self) -> Sequence[SourceFolder]:
        """
        Every folder (L{listFolders}), remembering each one's directory.
        """
        folders, self._folderDirectories = findFolders(self.path)
        return folders

    def fingerprint(self, folder: SourceFolder) -> tuple[str, float] | None:
        """
        The state of C{folder}'s C{cur/} and C{new/} directories, to be
        taken before it is listed: each one's inode, mtime and ctime in
        nanoseconds and size (C{"-"} for one missing).  A file delivered,
        renamed (a flag changed) or deleted changes its directory's mtime
        and ctime, so the same fingerprint at a later pass means nothing
        in the folder changed, but for a change within the same clock
        tick as the newest of those times (the caller trusts only a
        fingerprint whose newest time is older than a racy window before
        it was taken, as git trusts its index).  The inode tells a folder
        renamed into the place of another; the ctime, which no program can
        set, one whose mtime was set back (a restore that keeps times,
        C{rsync -a}, C{cp -p}, even onto a reused inode).  One C{stat} per
        directory; no file is read.

        @return: the fingerprint and the newest of the directories' mtimes
            and ctimes, in seconds; L{None} when a directory cannot be
            looked at (the listing will say why).
        """
        try:
            directory = os.path.join(self.path, self._relativeOf(folder))
        except SourceError:
            return None
        parts: list[str] = []
        newest = float("-inf")
        for subdir in SUBDIRS:
            try:
                status = os.stat(os.path.join(directory, subdir))
            except FileNotFoundError:
                parts.append(f"{subdir} -")
                continue
            except OSError:
                return None
            parts.append(
                f"{subdir} {status.st_ino} {status.st_mtime_ns} {status.st_ctime_ns}"
                f" {status.st_size}"
            )
            newest = max(newest, status.st_mtime_ns / 1e9, status.st_ctime_ns / 1e9)
        return " ".join(parts), newest

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
        if not isFolderName(name) or "/" in name:
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
            scanned = _scan(opened, self.path)
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
        return settled(self._listMessages, folder)

    def listMessagesInTurns(
        self, folder: SourceFolder, cooperator: Cooperator, turn: int = LISTING_TURN
    ) -> Deferred[Sequence[SourceMessage]]:
        """
        L{listMessages}, letting the reactor run while a large folder is
        listed: up to C{turn} files are listed at once, and a folder of
        more in turns that C{cooperator} runs (500,000 files listed at
        once held the reactor 4.4 s, 33 s on a loaded machine: the status
        site unanswered, a connection's timeout fired).  The first turn
        runs before this returns: a folder of fewer files has fired.
        """
        listed: list[Sequence[SourceMessage]] = []
        turns = self._listingTurns(folder, turn, listed)
        try:
            next(turns)
        except StopIteration:
            return succeed(listed[0])
        except SourceError as e:
            return fail(e)
        return cooperator.coiterate(turns).addCallback(lambda _: listed[0])

    def _listMessages(self, folder: SourceFolder) -> Sequence[SourceMessage]:
        """
        The messages of C{folder} (L{listMessages}), at once.
        """
        listed: list[Sequence[SourceMessage]] = []
        for _ in self._listingTurns(folder, sys.maxsize, listed):
            pass
        return listed[0]

    def _listingTurns(
        self, folder: SourceFolder, turn: int, listed: list[Sequence[SourceMessage]]
    ) -> Iterator[None]:
        """
        List C{folder} into C{listed}, yielding between turns of C{turn}
        files, and remember where each message's file is.

        @raise SourceError: the folder is gone or cannot be listed.
        """
        # A new listing, a new pass: its reads open the folder afresh.
        self._held.release(self, folder.key)
        opened = OpenFolder(self.path, self._relativeOf(folder))
        with opened:
            _mustBeFound(opened, self.path)
            scanned: list[Scanned] = []
            try:
                yield from scanInTurns(opened, scanned, turn)
            except OSError as e:
                raise _unreadable(opened, e) from e
            files = self._messageFiles[folder.key] = FolderFiles(opened.relative, [])
            keywords = readKeywords(opened.tree, opened.relative)
            flags: _Flags = {}
            runs: list[list[_Row]] = []
            for start in range(0, len(scanned), turn):
                if start:
                    yield None
                part = scanned[start : start + turn]
                files.add(part)
                run = _rows(flags, keywords, part)
                _sortRows(run)
                runs.append(run)
        del scanned
        rows = yield from _merged(runs)
        messages: list[SourceMessage] = []
        for start in range(0, len(rows), turn):
            if start:
                yield None
            messages += _listed(rows[start : start + turn])
        files.last = messages[-1].key if messages else None
        listed.append(messages)

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
        rescan = partial(self._rescan, folder)
        held = self._held.take(self, folder.key)
        if files is None and held is not None:
            # Gone at the last rescan: opened afresh.
            held.close()
            held = None
        try:
            batch = _Batch(self.path, files or rescan(), rescan, files is None, held)
        except SourceError as e:
            return succeed(unreadableAll(str(e), messages))
        except BaseException:
            if held is not None:
                held.close()
            raise
        with batch:
            bodies = batch.read(messages)
            if not batch.rescanned and files is not None and messages[-1].key != files.last:
                # More steps of this folder follow: it stays open for them
                # (not after a rescan: files had moved, or the folder).
                self._held.hold(self, folder.key, batch.keep())
        return succeed(bodies)

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


def _scan(opened: OpenFolder, root: str) -> list[Scanned]:
    """
    Scan an open folder (L{scanFolder}).

    @param root: the Maildir.
    @raise SourceError: it is gone or cannot be listed.
    """
    _mustBeFound(opened, root)
    try:
        return scanFolder(opened)
    except OSError as e:
        raise _unreadable(opened, e) from e


def _mustBeFound(opened: OpenFolder, root: str) -> None:
    """
    @raise SourceError: the open folder has neither C{cur/} nor C{new/}.
    """
    if not opened.found:
        if linksToNothing(os.path.join(root, opened.relative)):
            raise SourceError(
                f"cannot list the Maildir folder {opened.shown}: symbolic link to nothing"
            )
        raise SourceError(f"no such Maildir folder: {opened.shown} (no cur/ or new/)")


def _unreadable(opened: OpenFolder, error: OSError) -> SourceError:
    """
    The error of a folder whose C{cur/} or C{new/} cannot be read.
    """
    return SourceError(f"cannot list the Maildir folder {opened.shown}: {describe(error)}")


def _rows(flags: _Flags, keywords: dict[str, str], scanned: list[Scanned]) -> list[_Row]:
    """
    What C{listMessages} sorts of each file: L{_rowsPython}, in C where the
    extension L{imapmig.sources._listing} was built.
    """
    return _rowsOf(scanned, flags, flagsOf, keywords)


def _rowsPython(
    scanned: list[Scanned],
    flags: _Flags,
    flagsOf: Callable[[str | None, dict[str, str]], tuple[str, ...]],
    keywords: dict[str, str],
    /,
) -> list[_Row]:
    """
    What C{listMessages} sorts of each file: the date and size the scan
    found (its name's, else its status's; undated and 0 where neither
    says: no status when the file was renamed or deleted between the
    directory's reading and its status, and readBodies looks for it
    again, meanwhile the server dates it), the key and the flags (the
    reference of the C extension's C{rowsOf}, and its stand-in where it
    was not built).

    @param flags: the flags of the folder's combinations of info letters
        met so far (those met now are added).
    @param flagsOf: the flags of letters met first
        (L{imapmig.sources.maildir.names.flagsOf}).
    @param keywords: the folder's C{dovecot-keywords}.
    """
    rows: list[_Row] = []
    append = rows.append
    known = flags.get
    # Once per message where the extension is not built, so inline.
    for key, _, _, _, letters, _, when, size in scanned:
        flagged = known(letters)
        if flagged is None:
            flagged = flags[letters] = flagsOf(letters, keywords)
        append((_UNDATED if when is None else when, key, flagged, size or 0))
    return rows


_rowsOf: Callable[
    [list[Scanned], _Flags, Callable[[str | None, dict[str, str]], tuple[str, ...]], dict[str, str]],
    list[_Row],
]
try:
    from imapmig.sources._listing import rowsOf as _rowsOf
except ImportError:
    _rowsOf = _rowsPython


def _sortRows(rows: list[_Row]) -> None:
    """
    Sort C{rows} (as L{_merged} describes): by their dates alone where no
    two are the same, which sorts them as the tuples would be sorted (a
    sort by floats compares them in C, where tuples compare their first
    items for equality and then by order as objects: 1,600 instructions a
    message against 500 with the test for equal dates), else as tuples.
    """
    rows.sort(key=_DATE)
    if _datesRepeat(rows):
        rows.sort()


_DATE = itemgetter(0)


def _datesRepeatPython(rows: list[_Row], /) -> bool:
    """
    Whether two neighbouring C{rows} have the same date (the reference of
    the C extension's C{datesRepeat}, and its stand-in where it was not
    built).
    """
    dates = list(map(_DATE, rows))
    return any(map(eq, dates, islice(dates, 1, None)))


_datesRepeat: Callable[[list[_Row]], bool]
try:
    from imapmig.sources._listing import datesRepeat as _datesRepeat
except ImportError:
    _datesRepeat = _datesRepeatPython


def _merged(runs: list[list[_Row]]) -> Generator[None, None, list[_Row]]:
    """
    The rows of sorted C{runs}, sorted, two runs merged a turn (a sort of
    a list of two sorted runs merges them): a turn takes no longer than
    merging the last two halves, and the whole no more work than one sort
    of sorted runs.

    Rows are sorted as tuples (keys are unique, so the flags are never
    compared): undated first (dated minus infinity); a file dated before
    1970 (a negative mtime) keeps its date.
    """
    while len(runs) > 1:
        merged = []
        for index in range(0, len(runs) - 1, 2):
            pair = runs[index] + runs[index + 1]
            pair.sort()
            merged.append(pair)
            yield None
        if len(runs) % 2:
            merged.append(runs[-1])
        runs = merged
    return runs[0] if runs else []


def _listed(rows: list[_Row]) -> list[SourceMessage]:
    """
    The messages of the rows of L{_rows}: L{_listedPython}, in C where the
    extension L{imapmig.sources._listing} was built.
    """
    if _listedMessages is None:
        return _listedPython(rows)
    return _listedMessages(rows, SourceMessage, _FIELDS)


def _listedPython(rows: list[_Row]) -> list[SourceMessage]:
    """
    The messages of the rows of L{_rows} (the reference of the C
    extension's C{listedMessages}, and its stand-in where it was not
    built).
    """
    return [
        listedMessage(key, flags, None if when == _UNDATED else utcDatetime(when), size)
        for when, key, flags, size in rows
    ]


# SourceMessage's fields, in the order the C extension's listedMessages
# sets them from a row (as listedMessage sets them: through its slots'
# descriptors).
_FIELDS = tuple(SourceMessage.__dict__[name] for name in ("key", "flags", "internalDate", "size"))

_listedMessages: Callable[[list[_Row], type[SourceMessage], tuple[object, ...]], list[SourceMessage]] | None
try:
    from imapmig.sources._listing import listedMessages as _listedMessages
except ImportError:
    _listedMessages = None


class _Batch:
    """
    One batch of L{MaildirSource.readBodies}: the folder, open, and where
    its files are, looked for again (the folder scanned once more) at most
    once.  A context manager: the folder is closed on leaving, unless it
    was kept (L{keep}).

    @ivar rescanned: whether the folder was scanned again for this batch.
    """

    def __init__(
        self,
        root: str,
        files: FolderFiles,
        rescan: Callable[[], FolderFiles],
        rescanned: bool,
        opened: OpenFolder | None = None,
    ) -> None:
        """
        @param root: the Maildir.
        @param files: where the folder's files are, as last scanned.
        @param rescan: scan the folder again.
        @param rescanned: whether C{files} were scanned for this batch.
        @param opened: the folder, open (held from a step before), which
            the batch then owns; L{None}: it is opened.
        @raise SourceError: the folder cannot be opened.
        """
        self._root = root
        self._files = files
        self._rescan = rescan
        self.rescanned = rescanned
        self._opened = OpenFolder(root, files.relative) if opened is None else opened
        self._kept = False

    def __enter__(self) -> _Batch:
        return self

    def __exit__(self, *excInfo: object) -> None:
        if not self._kept:
            self._opened.close()

    def keep(self) -> OpenFolder:
        """
        The folder, open, for the caller to close: the batch leaves it
        open.
        """
        self._kept = True
        return self._opened

    def read(self, messages: Sequence[SourceMessage]) -> ReadBodies:
        """
        The bodies of C{messages}, in order, with the facts of their octets
        found as they were read (where the common case read them).
        """
        bodies = ReadBodies()
        if self._opened.readListed(messages, self._files.table, bodies):
            self._readMissed(messages, bodies)
        return bodies

    def _readMissed(self, messages: Sequence[SourceMessage], bodies: ReadBodies) -> None:
        """
        Read the bodies the common case did not (L{NOT_READ} in C{bodies}),
        in order, each where its file is now.
        """
        index = 0
        try:
            for index, message in enumerate(messages):
                if bodies[index] is NOT_READ:
                    bodies[index] = self._body(message, self._files.locate(message.key))
        except SourceError as e:
            # The folder became unreadable while being read again.
            for index in range(index, len(messages)):
                if bodies[index] is NOT_READ:
                    bodies[index] = UnreadableMessage(str(e))

    def _body(self, message: SourceMessage, located: Located | None) -> MessageBody:
        """
        The body of one message where the common case did not read it.

        @param located: where its file was listed.
        @raise SourceError: the folder was scanned again and cannot be
            opened any more.
        """
        body = None if located is None else self._opened.read(located, message.size)
        if body is None and not self.rescanned:
            located, body = self._again(message, located)
        if body is None:
            return UnreadableMessage(f"file vanished: {self._whereWas(message, located)}")
        return body

    def _again(
        self, message: SourceMessage, seen: Located | None
    ) -> tuple[Located | None, MessageBody | None]:
        """
        Scan the folder again and read the file of C{message} where it is
        now.

        @param seen: where the file was.
        @return: where it was last seen, and its body (L{None} if it is
            gone).
        """
        self._files, self.rescanned = self._rescan(), True
        self._opened.close()
        self._opened = OpenFolder(self._root, self._files.relative)
        located = self._files.locate(message.key)
        if located is None:
            return seen, None
        return located, self._opened.read(located, message.size)

    def _whereWas(self, message: SourceMessage, located: Located | None) -> str:
        """
        Name the file of C{message} for the admin: its last known path, or
        its key and folder when it was never seen.
        """
        if located is not None:
            index, name, _ = located
            return os.path.join(self._opened.shownDirectory(index), carriedName(name))
        return f"{message.key} in {self._opened.shown}"
