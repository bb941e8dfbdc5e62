# -*- test-case-name: tests.test_state_lock -*-
"""
One owner per state database: the daemon that opens a SQLite state
database holds an exclusive lock on a file beside it, so that a second
daemon started on the same database refuses to start instead of copying
every message again.

The lock is C{flock(2)} on C{<database>.lock}: the kernel releases it when
its holder exits, however it exits (SIGKILL, a crash, a power cut), so a
restart after a crash just works, and nothing needs cleaning up by hand.
The file holds, for the admin and for the refusal's message, who holds
it: C{"pid 1234 on host mail1, since 2026-11-25 15:40:12 UTC"}.

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
from datetime import datetime, timezone
from typing import Callable

from imapmig.errors import PermanentError

# How much of a lock file is read to name its holder: the one line we
# write is far shorter.
_HOLDER_MAX = 200


class StateFileLock:
    """
    An exclusive, non-blocking C{flock} on C{<database>.lock}, held from
    L{acquire} until L{release} or the end of the process.

    @ivar path: the lock file's path.
    @ivar holder: what the lock file says of this holder.
    """

    def __init__(self, path: str, fd: int, holder: str) -> None:
        """
        Use L{acquire}.

        @param path: the lock file's path.
        @param fd: its open descriptor, on which the lock is held.
        @param holder: what was written into it.
        """
        self.path = path
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
        its lock file (mode 0600) if need be, and write the holder into it.

        @param seconds: the clock that says since when the lock is held.
        @param pid: the holder's process id (by default this process's).
        @param host: the holder's host name (by default this host's).

        @raise PermanentError: another process holds it (the message names
            the holder, as its lock file says), or the lock file cannot be
            created, locked or written.
        """
        path = databasePath + ".lock"
        try:
            # O_NOFOLLOW: the file is truncated and written, and the daemon
            # may run as root; a symbolic link planted in its place must
            # not redirect that write.
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as e:
            raise PermanentError(
                f"{databasePath}: cannot open the lock file {path}: {_reason(e)}"
            ) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise PermanentError(
                    f"{databasePath} is in use by another imapmig ({_holderOf(fd)});"
                    " one daemon per state database"
                ) from None
            except OSError as e:
                raise PermanentError(
                    f"{databasePath}: cannot lock {path}: {_reason(e)}"
                ) from None
            since = datetime.fromtimestamp(seconds(), timezone.utc)
            holder = (
                f"pid {os.getpid() if pid is None else pid}"
                f" on host {socket.gethostname() if host is None else host},"
                f" since {since:%Y-%m-%d %H:%M:%S} UTC"
            )
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, holder.encode("utf-8") + b"\n", 0)
            except OSError as e:
                raise PermanentError(
                    f"{databasePath}: cannot write the lock file {path}: {_reason(e)}"
                ) from None
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, holder)

    def release(self) -> None:
        """
        Release the lock, leaving its file empty.  Releasing twice is
        harmless.

        The file is left in place: removing it would let one process lock
        the removed file while another creates and locks a new one.
        """
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            # While it is still ours: a stale holder must not be shown.
            os.ftruncate(fd, 0)
        except OSError:
            pass
        os.close(fd)

    def __repr__(self) -> str:
        state = "held" if self._fd is not None else "released"
        return f"<StateFileLock {self.path!r} {state}: {self.holder}>"


def _holderOf(fd: int) -> str:
    """
    Who holds the lock on C{fd}, as its file says: one line, made
    printable and short.
    """
    try:
        content = os.pread(fd, _HOLDER_MAX, 0)
    except OSError as e:
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
    if e.errno == errno.ELOOP:
        return "it is a symbolic link"
    return e.strerror
