# -*- test-case-name: tests.test_sources_local -*-
"""
What the sources reading local files (Maildir, mbox, C{.eml}) share:
opening files beneath the source's directory without ever leaving it,
walking it and telling what its entries are, naming its folders, and
carrying file names that are not UTF-8 (reading one message file is
L{imapmig.sources.messagefile}'s).

The directory an admin configures (and every directory above it) is
trusted; everything below it is not: its owner may put symbolic links,
FIFOs, sockets or loops there, and change them while the source reads.
So files below the root are opened one path component at a time, relative
to the directory opened before, never following a symbolic link
(C{O_NOFOLLOW}); a link is followed only after its target has been
resolved and found inside the root, and the target is then opened the same
way, so that a link changed in between is refused rather than followed.
Files are opened with C{O_NONBLOCK} (a FIFO must not block the reactor) and
checked, with C{fstat} on what was opened, to be regular files.

Names
=====
Python decodes a file name that is not UTF-8 with C{surrogateescape}; such
a string can be neither stored in SQLite nor sent as a mailbox name.  A
name is carried instead in a reversible form (L{carriedName}, undone by
L{originalName}): each octet that is not part of valid UTF-8 becomes
C{%XX} (two upper-case hexadecimal digits, 80 to FF); and so that the form
stays unambiguous, a C{%} already in a name is written C{%25} when it is
followed by C{25} or by two upper-case hexadecimal digits from C{80} to
C{FF}.  Every other name (all valid UTF-8 names without such a C{%}) is
carried unchanged.  The octets C{caf\\xe9} give C{caf%E9}; the valid name
C{caf%E9} gives C{caf%25E9}.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from datetime import datetime, timezone
from types import TracebackType
from typing import Callable, Protocol, Sequence, TypeVar

from attrs import frozen
from twisted.internet.defer import Deferred, fail, succeed

from imapmig.errors import LeavesTree, SourceError
from imapmig.mail.message import (
    MessageBody,
    SourceFolder,
    UnreadableMessage,
)

__all__ = [
    "FILE_FLAGS",
    "SPECIAL_USE",
    "Entry",
    "Irregular",
    "Memo",
    "OpenTree",
    "carriedName",
    "describe",
    "fileKind",
    "followEntry",
    "hasUndecodable",
    "inboxFirst",
    "localFolder",
    "linkProblem",
    "linksToNothing",
    "notRegular",
    "openProblem",
    "openTree",
    "originalName",
    "settled",
    "shownPath",
    "sizeAndMtimePython",
    "utcDatetime",
    "utcDatetimePython",
    "unreadableAll",
    "walkTree",
]

_State = TypeVar("_State")
_Key = TypeVar("_Key")
_Value = TypeVar("_Value")

# What carriedName replaces: an undecodable octet, or a "%" that would
# otherwise read as the escape of one (or of "%" itself).
_TO_CARRY = re.compile("[\udc80-\udcff]|%(?=25|[89A-F][0-9A-F])")
_CARRIED = re.compile("%(25|[89A-F][0-9A-F])")


def _carry(match: re.Match[str]) -> str:
    found = match.group()
    if found == "%":
        return "%25"
    return "%%%02X" % (ord(found) - 0xDC00)


def _uncarry(match: re.Match[str]) -> str:
    value = int(match.group(1), 16)
    return "%" if value == 0x25 else chr(0xDC00 + value)


def carriedName(name: str) -> str:
    """
    The reversible form of a file name in which it is stored, logged and
    sent (see the module's documentation).

    @param name: a file name as C{os} returns it (undecodable octets as
        C{surrogateescape} code points).
    @return: C{name} itself when it is valid UTF-8 without an ambiguous
        C{%}; otherwise its carried form, which is always valid UTF-8.
    """
    if "%" not in name and (name.isascii() or not hasUndecodable(name)):
        return name
    return _TO_CARRY.sub(_carry, name)


def originalName(carried: str) -> str:
    """
    Undo L{carriedName}: C{originalName(carriedName(n)) == n} for every
    name C{n}.

    @param carried: a name as L{carriedName} gives it.
    @return: the file name, as C{os} takes it.
    """
    if "%" not in carried:
        return carried
    return _CARRIED.sub(_uncarry, carried)


def hasUndecodable(name: str) -> bool:
    """
    Whether a file name holds octets that are not valid UTF-8.
    """
    if name.isascii():
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


_KINDS = (
    (stat.S_ISDIR, "directory"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISLNK, "symbolic link"),
    (stat.S_ISREG, "regular file"),
)


def fileKind(mode: int) -> str:
    """
    What kind of file a C{st_mode} describes, for messages:
    C{"FIFO"}, C{"socket"}, C{"character device"}, ...
    """
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return "file of unknown type"


# Opens of directories on the way; files add their own flags.
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A file below the root: a FIFO must not block, a link is not followed.
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class OpenTree:
    """
    A source's root directory, open, for opening what lies beneath it
    without leaving it (see the module's documentation).  A context
    manager: the root stays open until it exits.

    @ivar root: the root as configured.
    @ivar fd: the root, open.
    """

    def __init__(self, root: str) -> None:
        """
        @param root: the directory.
        @raise OSError: it cannot be opened as a directory.
        """
        self.root = root
        self._realRoot: str | None = None
        self.fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    @property
    def realRoot(self) -> str:
        """
        The root with every symbolic link resolved (found when first asked
        for: only symbolic links below the root need it).
        """
        if self._realRoot is None:
            self._realRoot = os.path.realpath(self.root)
        return self._realRoot

    def __enter__(self) -> OpenTree:
        return self

    def __exit__(
        self,
        excType: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """
        Close the root.
        """
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def path(self, relative: str) -> str:
        """
        The path of C{relative} under the root as configured, for messages.
        """
        return os.path.join(self.root, relative) if relative else self.root

    def open(self, relative: str, flags: int = FILE_FLAGS) -> int:
        """
        Open C{relative} beneath the root.  Symbolic links on the way (the
        file's own included) are followed only when their target lies
        inside the root.

        @param relative: a path relative to the root, C{/} between levels,
            without C{.} or C{..} levels (C{""} is the root itself).
        @param flags: the C{os.open} flags of the last level.
        @return: the open file, which the caller closes.
        @raise LeavesTree: a symbolic link on the way leads out of the root.
        @raise OSError: it cannot be opened (C{ELOOP} for a symbolic link
            loop, or for a link put in place after it was resolved).
        """
        try:
            return self._walk(relative, flags)
        except OSError as e:
            # O_NOFOLLOW refuses a link with ELOOP, or ENOTDIR when a
            # directory was asked for: resolve it, and open its target.
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
        return self._walk(self.resolve(relative), flags)

    def resolve(self, relative: str) -> str:
        """
        Where C{relative} leads, every symbolic link resolved, relative to
        the root.

        @raise LeavesTree: it leads out of the root.
        @raise OSError: it cannot be resolved (C{ENOENT} for a link to
            nothing, C{ELOOP} for a loop).
        """
        real = os.path.realpath(os.path.join(self.realRoot, relative), strict=True)
        if os.path.commonpath([real, self.realRoot]) != self.realRoot:
            raise LeavesTree(relative, real)
        inside = os.path.relpath(real, self.realRoot)
        return "" if inside == "." else inside

    def _walk(self, relative: str, flags: int) -> int:
        """
        Open C{relative} one level at a time from the root, following no
        symbolic link.
        """
        parts = _levels(relative)
        if not parts:
            return os.open(".", flags & ~os.O_NOFOLLOW, dir_fd=self.fd)
        directory = self.fd
        try:
            for part in parts[:-1]:
                opened = os.open(part, _DIRECTORY, dir_fd=directory)
                self._closeLevel(directory)
                directory = opened
            return os.open(parts[-1], flags | os.O_NOFOLLOW, dir_fd=directory)
        finally:
            self._closeLevel(directory)

    def _closeLevel(self, directory: int) -> None:
        """
        Close a directory opened on the way (not the root).
        """
        if directory != self.fd:
            os.close(directory)


def _levels(relative: str) -> list[str]:
    """
    The levels of a path beneath the root, C{/} between them.

    @raise OSError: a level is C{.} or C{..}.
    """
    parts = [part for part in relative.split("/") if part]
    if any(part in (".", "..") for part in parts):
        raise OSError(errno.EINVAL, f"not a path beneath the root: {relative!r}")
    return parts


def describe(error: OSError) -> str:
    """
    What the system says of an error (its C{strerror}), else the error
    itself: for the reasons given to the admin.
    """
    return error.strerror or str(error)


def openTree(root: str, failing: str) -> OpenTree:
    """
    Open a source's root (an L{OpenTree}).

    @param failing: what the reason starts with if it cannot be opened:
        C{"cannot list"}, C{"cannot read the Maildir"}.
    @raise SourceError: it cannot be opened; the reason names it and says
        why.
    """
    try:
        return OpenTree(root)
    except OSError as e:
        raise SourceError(f"{failing} {carriedName(root)}: {describe(e)}") from e


def linkProblem(path: str, error: Exception) -> str:
    """
    Why a file reached through a symbolic link is not read, for the admin.

    @param path: the link (or the path holding it), as it is to be shown.
    @param error: what resolving or opening it raised.
    """
    if isinstance(error, LeavesTree):
        return (
            f"symbolic link leading out of the source directory, not followed:"
            f" {path} -> {carriedName(error.target)}"
        )
    if isinstance(error, FileNotFoundError):
        return f"symbolic link to nothing: {path}"
    if isinstance(error, OSError) and error.errno == errno.ELOOP:
        return f"symbolic link loop: {path}"
    if isinstance(error, OSError):
        return f"cannot follow the symbolic link {path}: {describe(error)}"
    return f"cannot follow the symbolic link {path}: {error}"


def openProblem(
    shown: str,
    error: LeavesTree | OSError,
    missing: str = "file vanished",
    other: str = "cannot read",
) -> str:
    """
    Why a file could not be opened, for the admin.

    @param shown: the file, as shown to the admin.
    @param error: what opening it raised.
    @param missing: what is said of a file that does not exist.
    @param other: what is said of a file that cannot be opened for another
        reason than a symbolic link, a missing file or a permission.
    """
    if isinstance(error, LeavesTree) or error.errno == errno.ELOOP:
        return linkProblem(shown, error)
    if isinstance(error, FileNotFoundError):
        return f"{missing}: {shown}"
    if isinstance(error, PermissionError):
        return f"permission denied: {shown}"
    return f"{other} {shown}: {describe(error)}"


def linksToNothing(path: str) -> bool:
    """
    Whether C{path} is a symbolic link to nothing (an unmounted shared
    folder?).
    """
    return os.path.islink(path) and not os.path.exists(path)


def notRegular(path: str, mode: int) -> str:
    """
    Why a file that is not a regular file is not read, for the admin.
    """
    return f"not a regular file: {fileKind(mode)}: {path}"


def shownPath(directory: str | None, name: str) -> str:
    """
    A file's path as shown to the admin: C{name} (carried) in
    C{directory} (already carried), if any.
    """
    shown = carriedName(name)
    return shown if directory is None else os.path.join(directory, shown)


@frozen
class Irregular:
    """
    An entry below the root that is not a regular file (what
    L{followEntry} finds).

    @ivar reason: why it is not read; L{None} for a symbolic link to a
        regular file inside the root, which is read.
    @ivar target: that file, relative to the root.
    @ivar status: that file's status.
    @ivar toDirectory: whether it is a symbolic link to a directory inside
        the root (whose entries a walk lists where they are).
    """

    reason: str | None
    target: str = ""
    status: os.stat_result | None = None
    toDirectory: bool = False


class Entry(Protocol):
    """
    What L{followEntry} looks at of a directory's entry: the part of
    C{os.DirEntry} it uses (a Maildir listing read in C makes its own).
    """

    @property
    def name(self) -> str: ...

    def is_symlink(self) -> bool: ...

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result: ...


def followEntry(tree: OpenTree, relative: str, shown: str, entry: Entry) -> Irregular:
    """
    What an entry that is not a regular file is: the reason it is not read
    (a FIFO, a socket, a device; a symbolic link leading out of the root,
    to nothing, into a loop, or to something else than a regular file), or
    the regular file inside the root a symbolic link leads to.

    @param relative: the entry, relative to the root.
    @param shown: the entry, as shown to the admin.
    @raise FileNotFoundError: it is gone.
    """
    try:
        if not entry.is_symlink():
            return Irregular(notRegular(shown, entry.stat(follow_symlinks=False).st_mode))
    except FileNotFoundError:
        raise
    except OSError as e:
        return Irregular(f"cannot read {shown}: {describe(e)}")
    return _followLink(tree, relative, shown)


def _followLink(tree: OpenTree, relative: str, shown: str) -> Irregular:
    """
    What a symbolic link beneath the root leads to (see L{followEntry}).
    """
    try:
        target = tree.resolve(relative)
        status = os.stat(os.path.join(tree.realRoot, target))
    except (LeavesTree, OSError) as e:
        return Irregular(linkProblem(shown, e))
    if not stat.S_ISREG(status.st_mode):
        kind = fileKind(status.st_mode)
        reason = f"not a regular file: symbolic link to a {kind}: {shown}"
        return Irregular(reason, toDirectory=stat.S_ISDIR(status.st_mode))
    return Irregular(None, target, status)


def walkTree(
    tree: OpenTree,
    top: _State,
    descend: Callable[[str, _State], _State],
    visit: Callable[[os.DirEntry[str], str, _State], None],
) -> None:
    """
    Visit every entry beneath the root, depth first, but those whose name
    starts with C{.}; directories (not symbolic links to them) are
    descended into rather than visited.

    @param top: what the root's entries are visited with.
    @param descend: given a directory's name and what its own entries were
        visited with, what its entries are visited with.
    @param visit: given an entry, its path relative to the root and what
        its directory's entries are visited with.
    @raise SourceError: a directory cannot be listed.
    """
    pending = [("", top)]
    while pending:
        relative, state = pending.pop()
        pending += _walkDirectory(tree, relative, state, descend, visit)


def _walkDirectory(
    tree: OpenTree,
    relative: str,
    state: _State,
    descend: Callable[[str, _State], _State],
    visit: Callable[[os.DirEntry[str], str, _State], None],
) -> list[tuple[str, _State]]:
    """
    Visit the entries of one directory (see L{walkTree}).

    @return: its subdirectories, relative to the root, each with what its
        entries are to be visited with.
    @raise SourceError: it cannot be listed.
    """
    directory = tree.path(relative)
    subdirectories = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                entryRelative = os.path.join(relative, entry.name)
                if entry.is_dir(follow_symlinks=False):
                    subdirectories.append((entryRelative, descend(entry.name, state)))
                else:
                    visit(entry, entryRelative, state)
    except OSError as e:
        raise SourceError(f"cannot list {carriedName(directory)}: {describe(e)}") from e
    return subdirectories


class Memo(dict[_Key, _Value]):
    """
    The values of a function, each worked out the first time its argument
    is looked up: for what many messages of a listing share (the flags of
    a combination of Maildir letters, or of mbox header fields).
    """

    def __init__(self, compute: Callable[[_Key], _Value]) -> None:
        """
        @param compute: the function.
        """
        super().__init__()
        self._compute = compute

    def __missing__(self, key: _Key) -> _Value:
        value = self[key] = self._compute(key)
        return value


# Well-known top-level folder names and their RFC 6154 attributes, matched
# case-insensitively.
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


def localFolder(path: tuple[str, ...], key: str) -> SourceFolder:
    """
    A folder of a local source: a top-level folder with a well-known name
    (C{Sent}, C{Sent Items}, C{Drafts}, C{Trash}, C{Junk}, C{Archive},
    ...) carries its RFC 6154 attribute, for information.
    """
    specialUse = SPECIAL_USE.get(path[0].casefold()) if len(path) == 1 else None
    return SourceFolder(path=path, key=key, specialUse=specialUse)


def settled(call: Callable[..., _Value], *args: object) -> Deferred[_Value]:
    """
    What C{call(*args)} gives, as a Deferred that has fired: the local
    sources work at once, and an L{IMessageSource} answers with Deferreds.

    @return: a Deferred with its result, or failed with the L{SourceError}
        it raised (any other exception, a bug, is raised).
    """
    try:
        return succeed(call(*args))
    except SourceError as e:
        return fail(e)


def unreadableAll(reason: str, messages: Sequence[object]) -> list[MessageBody]:
    """
    One L{UnreadableMessage} per message of C{messages}, all for C{reason}
    (a batch that cannot be read at all).
    """
    return [UnreadableMessage(reason) for _ in messages]


def inboxFirst(folders: list[SourceFolder]) -> list[SourceFolder]:
    """
    Sort C{folders}, in place: C{INBOX} first, then the others by path,
    parents before children.

    @return: C{folders}.
    """
    folders.sort(key=lambda f: (f.path[0] != "INBOX", f.path, f.key))
    return folders


def sizeAndMtimePython(dirFd: int, name: str, /) -> tuple[int, float] | None:
    """
    The size and mtime of a listed file, as C{os.stat} gives them
    (C{st_size}, C{st_mtime}): in a listing the C extension's
    C{Directory} takes the status itself (the GIL released once a turn of
    files); this is its Python twin's, L{imapmig.sources.maildir.scan}.

    @param dirFd: the open directory holding it.
    @param name: its name there; a symbolic link is not followed.
    @return: L{None} when it cannot be had (renamed or deleted since the
        directory was read).
    """
    try:
        status = os.stat(name, dir_fd=dirFd, follow_symlinks=False)
    except (OSError, ValueError):
        return None
    return status.st_size, status.st_mtime


def utcDatetimePython(seconds: float, /) -> datetime:
    """
    A listed message's INTERNALDATE from the seconds since 1970 (UTC) its
    name or its file's mtime gives: C{datetime.fromtimestamp(seconds,
    timezone.utc)}, the reference of the C extension's L{utcDatetime} and
    its stand-in where it was not built.
    """
    return datetime.fromtimestamp(seconds, timezone.utc)


utcDatetime: Callable[[float], datetime]
"""
L{utcDatetimePython}, in C where the extension L{imapmig.sources._listing}
was built (once per message of a Maildir listing: Python's builds two
datetimes, the second by C{timezone.utc.fromutc}, about 2,900 instructions).
"""

try:
    from imapmig.sources._listing import utcDatetime
except ImportError:
    utcDatetime = utcDatetimePython
