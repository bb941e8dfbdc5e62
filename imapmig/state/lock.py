# -*- test-case-name: tests.test_state_lock -*-
"""
One owner per state database: the daemon that opens a SQLite state
database holds an exclusive lock on the database file itself, so that a
second daemon started on the same database refuses to start instead of
copying every message again.

The lock is C{flock(2)} on the database file, taken on a descriptor of our
own.  What is locked is the file, not a name: a symbolic link, a hard link,
a bind mount or any other path that reaches the same file meets the same
lock (a separate C{<database>.lock} file, as before, was one name among
many: removed, or reached through another name, it let a second daemon
run).  The kernel releases it when its holder exits, however it exits
(SIGKILL, a crash, a power cut), so a restart after a crash just works, and
nothing needs cleaning up by hand.

C{flock} and the POSIX C{fcntl} locks SQLite takes on the same file are
independent on Linux, so the two do not meet; but closing I{any} descriptor
of a file drops every POSIX lock the process holds on it, SQLite's
included.  So a descriptor of ours is never closed while a SQLite
connection of this process is open on its file: L{_OpenFiles} parks it
until the last one closes.

The holder names itself in an extended attribute of the file
(C{user.imapmig.holder}), for the admin and for the refusal's message:
C{"pid 1234 on host mail1, since 2026-11-25 15:40:12 UTC"}.  The attribute
belongs to the file, so the refusal names the holder whatever name either
side used.  It is written after the lock is taken and removed at release;
one left behind by a killed holder is never read as the truth, since only
a refused C{flock} makes us read it.

A file with more than one hard link is refused too, lock or no lock: SQLite
names its C{-wal} file after the name it opens, so each name would keep a
journal of its own, and one would lose or corrupt what the other committed
(SQLite's "How To Corrupt", section 2.5).  A symbolic link is fine: SQLite
resolves it.

C{flock} is local to one host (on NFS it is emulated, or refused, as the
server decides): a state database is for one daemon on one host.

How the fleet replaces it: a later PostgreSQL store shares one database
among many daemons, which then must not exclude each other.  That store
takes no L{StateFileLock}; instead each daemon claims one job at a time
with a lease (a row per job, claimed with C{SELECT ... FOR UPDATE SKIP
LOCKED}, stamped with its holder and an expiry it renews while the job
runs), and the job queue asks the store for a job's lease before running
it.  Only L{imapmig.state.sqlite} creates this lock, so nothing else
changes.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
from collections import Counter
from datetime import datetime, timezone
from typing import Callable

from imapmig.errors import PermanentError

FileKey = tuple[int, int]
"""
A file's device and inode: what names it whatever path reaches it.
"""

HOLDER_ATTRIBUTE = "user.imapmig.holder"
"""
The extended attribute of the database file that names its holder.
"""

# How much of the attribute is read to name its holder: the one line we
# write is far shorter.
_HOLDER_MAX = 200


class _OpenFiles:
    """
    This process's state database files, by L{FileKey}: the SQLite
    connections open on them, and the descriptors of ours whose close
    waits for those connections to close.
    """

    def __init__(self) -> None:
        self._connections: Counter[FileKey] = Counter()
        self._parked: dict[FileKey, list[int]] = {}

    def dispose(self, key: FileKey, fd: int) -> None:
        """
        Close C{fd}, a descriptor of the file C{key}, or, while a SQLite
        connection of this process is open on that file, once it closes.
        """
        if self._connections[key]:
            self._parked.setdefault(key, []).append(fd)
        else:
            os.close(fd)

    def connected(self, key: FileKey) -> None:
        """
        A SQLite connection was opened on the file C{key}.
        """
        self._connections[key] += 1

    def disconnected(self, key: FileKey) -> None:
        """
        A SQLite connection on the file C{key} was closed; if it was the
        last, close the descriptors parked for it.
        """
        self._connections[key] -= 1
        if self._connections[key] <= 0:
            del self._connections[key]
            for fd in self._parked.pop(key, []):
                os.close(fd)


_files = _OpenFiles()


def fileKey(path: str) -> FileKey | None:
    """
    The L{FileKey} of the file C{path} reaches, or L{None} if it cannot be
    read.
    """
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def connectionOpened(key: FileKey) -> None:
    """
    Say that a SQLite connection of this process is now open on the file
    C{key}: until L{connectionClosed}, no descriptor of ours on that file
    is closed (which would drop that connection's locks).
    """
    _files.connected(key)


def connectionClosed(key: FileKey) -> None:
    """
    Say that a SQLite connection of L{connectionOpened} was closed.
    """
    _files.disconnected(key)


class StateFileLock:
    """
    An exclusive, non-blocking C{flock} on a state database file, held
    from L{acquire} until L{release} or the end of the process.

    @ivar path: the database's path, as given.
    @ivar key: the file's device and inode.
    @ivar mode: the file's mode when it was locked.
    @ivar holder: what this holder says of itself.
    """

    def __init__(self, path: str, fd: int, key: FileKey, mode: int, holder: str) -> None:
        """
        Use L{acquire}.

        @param path: the database's path.
        @param fd: its open descriptor, on which the lock is held.
        @param key: its device and inode.
        @param mode: its mode.
        @param holder: what was written into its attribute.
        """
        self.path = path
        self.key = key
        self.mode = mode
        self.holder = holder
        self._fd: int | None = fd

    @classmethod
    def acquire(
        cls,
        databasePath: str,
        seconds: Callable[[], float],
        pid: int | None = None,
        host: str | None = None,
    ) -> StateFileLock:
        """
        Take the lock of the state database at C{databasePath}, creating
        the (empty) file, mode 0600, if need be, and name the holder in its
        L{HOLDER_ATTRIBUTE}.  Two processes creating it at once open the
        same file: one of them takes the lock.

        @param seconds: the clock that says since when the lock is held.
        @param pid: the holder's process id (by default this process's).
        @param host: the holder's host name (by default this host's).

        @raise PermanentError: another process (or another store of this
            one) holds it, the message naming the holder as the file's
            attribute says; the file has more than one hard link; or it
            cannot be created, opened or locked.
        """
        fd, st = _open(databasePath)
        key = (st.st_dev, st.st_ino)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _inUse(databasePath, _holderOf(fd)) from None
            except OSError as e:
                raise PermanentError(
                    f"{databasePath}: cannot lock the state database: {_reason(e)}"
                ) from None
            links = os.fstat(fd).st_nlink
            if links > 1:
                raise PermanentError(
                    f"{databasePath}: the state database has {links} hard links; SQLite keeps"
                    " a -wal file per name, so two names would lose or corrupt what the"
                    " other committed: remove the other names (find / -samefile"
                    f" {databasePath} lists them); a symbolic link is fine"
                )
        except BaseException:
            fcntl.flock(fd, fcntl.LOCK_UN)
            _files.dispose(key, fd)
            raise
        since = datetime.fromtimestamp(seconds(), timezone.utc)
        holder = (
            f"pid {os.getpid() if pid is None else pid}"
            f" on host {socket.gethostname() if host is None else host},"
            f" since {since:%Y-%m-%d %H:%M:%S} UTC"
        )
        try:
            os.setxattr(fd, HOLDER_ATTRIBUTE, holder.encode("utf-8"))
        except OSError:
            # The lock holds all the same; a refusal then says that its
            # holder cannot be named (see _holderOf).
            pass
        return cls(databasePath, fd, key, st.st_mode, holder)

    def release(self) -> None:
        """
        Release the lock, removing the holder's name while it is still
        ours.  Releasing twice is harmless.
        """
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.removexattr(fd, HOLDER_ATTRIBUTE)
        except OSError:
            pass
        fcntl.flock(fd, fcntl.LOCK_UN)
        _files.dispose(self.key, fd)

    def __repr__(self) -> str:
        state = "held" if self._fd is not None else "released"
        return f"<StateFileLock {self.path!r} {state}: {self.holder}>"


def _open(databasePath: str) -> tuple[int, os.stat_result]:
    """
    Open the database file to lock it, creating it (empty, mode 0600) if
    it does not exist.  It is opened read-only: C{flock} needs no more,
    and nothing is written through this descriptor.

    @raise PermanentError: it cannot be opened or created, or it is not a
        regular file.
    """
    try:
        # O_NONBLOCK: a FIFO planted at the path must not hang the open.
        fd = os.open(
            databasePath,
            os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK,
            0o600,
        )
    except OSError as e:
        raise PermanentError(
            f"{databasePath}: cannot open the state database: {_reason(e)}"
        ) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise PermanentError(f"{databasePath}: cannot open the state database: not a regular file")
    return fd, st


def _inUse(databasePath: str, holder: str) -> PermanentError:
    """
    The refusal of a database another imapmig holds.
    """
    return PermanentError(
        f"{databasePath} is in use by another imapmig ({holder}); one daemon per state database"
    )


def _holderOf(fd: int) -> str:
    """
    Who holds the lock on C{fd}, as its file's L{HOLDER_ATTRIBUTE} says:
    one line, made printable and short.
    """
    try:
        content = os.getxattr(fd, HOLDER_ATTRIBUTE)[:_HOLDER_MAX]
    except OSError as e:
        if e.errno == errno.ENODATA:
            return "its holder has not written its name yet"
        if e.errno == errno.EOPNOTSUPP:
            return "its holder cannot be named: this file system keeps no extended attributes"
        return f"its holder cannot be read: {_reason(e)}"
    line = content.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    line = "".join(c if c.isprintable() else "?" for c in line)
    return line or "its holder has not written its name yet"


def _reason(e: OSError) -> str:
    """
    The reason C{e} gives, without the file name Python appends (the
    message names the file already).
    """
    if e.strerror is None:
        return str(e)
    return e.strerror
