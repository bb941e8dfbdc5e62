# -*- test-case-name: tests.test_secrets,tests.test_config -*-
"""
Secrets: passwords read from files that only their owner may read, and
L{Secret}, the value that carries one without ever showing it.
"""

from __future__ import annotations

import os
import stat

from attrs import field, frozen


@frozen(repr=False)
class Secret:
    """
    A password.  Its C{repr} and C{str} are C{Secret('***')}, so it can sit
    inside other value objects, log events and error messages without
    showing its value.

    @ivar value: the password itself; read it only where it is sent.
    """

    value: str = field(repr=False)

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


MAX_PASSWORD_FILE = 64 * 1024
"""
The largest password file read, in octets: a password is one line, and a
file larger than this is a mistake (a mail spool, a disk image) that must
not be read into memory.
"""


class PasswordFileError(ValueError):
    """
    A password file cannot be used.  The message names the file and says
    why; it never contains any of the file's content.
    """


def readPasswordFile(path: str, kind: str = "password") -> str:
    """
    Read a password from the first line of a file only its owner may read.

    Like buildbot's C{SecretInAFile}, a file that its group or others may
    read or write is refused: a password that other accounts can read is no
    longer a secret, and the admin should learn that now rather than later.

    @param path: the file's path.
    @param kind: what the file holds, as errors say it (C{"token"}).
    @return: the file's first line without its line ending (C{\\n} or
        C{\\r\\n}).
    @raise PasswordFileError: the file does not exist, cannot be read, is a
        directory or not a regular file, is accessible to group or others
        (mode C{& 0o077}), is larger than L{MAX_PASSWORD_FILE} octets (at
        most that many and one more are ever read), is not UTF-8 text, or
        its first line is empty.
    """
    try:
        # O_NONBLOCK: opening a FIFO by mistake must not hang the daemon;
        # it has no effect on a regular file.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise PasswordFileError(f"{kind} file {path} does not exist") from None
    except PermissionError:
        raise PasswordFileError(
            f"{kind} file {path} cannot be read (permission denied)"
        ) from None
    except IsADirectoryError:
        raise PasswordFileError(f"{kind} file {path} is a directory") from None
    except OSError as e:
        raise PasswordFileError(
            f"{kind} file {path} cannot be read: {e.strerror}"
        ) from None
    try:
        # fstat after open: the checks apply to the very file read below.
        status = os.fstat(fd)
        mode = status.st_mode
        if stat.S_ISDIR(mode):
            raise PasswordFileError(f"{kind} file {path} is a directory")
        if not stat.S_ISREG(mode):
            raise PasswordFileError(f"{kind} file {path} is not a regular file")
        if mode & 0o077:
            raise PasswordFileError(
                f"{kind} file {path} is accessible to group or others"
                f" (mode {stat.S_IMODE(mode):04o}); run: chmod 600 {path}"
            )
        if status.st_size > MAX_PASSWORD_FILE:
            raise _tooLarge(path, kind)
        with os.fdopen(fd, "rb", closefd=False) as f:
            # One octet more than allowed shows a file that grew since.
            content = f.read(MAX_PASSWORD_FILE + 1)
        if len(content) > MAX_PASSWORD_FILE:
            raise _tooLarge(path, kind)
    except OSError as e:
        raise PasswordFileError(
            f"{kind} file {path} cannot be read: {e.strerror}"
        ) from None
    finally:
        os.close(fd)
    firstLine = content.split(b"\n", 1)[0]
    if firstLine.endswith(b"\r"):
        firstLine = firstLine[:-1]
    if not firstLine:
        raise PasswordFileError(
            f"{kind} file {path} is empty (the {kind} is its first line)"
        )
    try:
        return firstLine.decode("utf-8")
    except UnicodeDecodeError:
        # The decoder's own message quotes an octet of the password.
        raise PasswordFileError(f"{kind} file {path} is not UTF-8 text") from None


def _tooLarge(path: str, kind: str) -> PasswordFileError:
    """
    The error for a password file larger than L{MAX_PASSWORD_FILE}.
    """
    return PasswordFileError(
        f"{kind} file {path} is larger than {MAX_PASSWORD_FILE // 1024} KiB"
        f" ({MAX_PASSWORD_FILE} octets): refused unread (the {kind} is its first line)"
    )
