# -*- test-case-name: tests.test_secrets,tests.test_credentials,tests.test_config -*-
"""
Secrets: passwords read from files that only their owner may read, and
L{Secret}, the value that carries one without ever showing it; and
systemd credentials, the secrets that the service manager hands the
daemon in the directory named by C{$CREDENTIALS_DIRECTORY}
(C{LoadCredential=}, C{LoadCredentialEncrypted=}, C{SetCredential=}).

A configuration names a credential by its name alone
(C{password_credential: alice}); L{readCredential} finds it and reads it
with the checks of a password file (L{readPasswordFile}).  systemd writes
each credential C{0400} in a read-only directory that only the service
may enter, owned by the service's user or granted to it by an ACL: both
pass those checks.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from typing import Mapping

from attrs import field, frozen

from imapmig.errors import CredentialError, PasswordFileError


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



def readPasswordFile(path: str, kind: str = "password") -> str:
    """
    Read a password from the first line of a file only its owner may read.

    Like buildbot's C{SecretInAFile}, a file that its group or others may
    read or write is refused: a password that other accounts can read is no
    longer a secret, and the admin should learn that now rather than later.
    A POSIX ACL that grants read to this process's user only (as systemd's
    C{LoadCredential=} gives one) is private (L{accessibleToOthers}).

    @param path: the file's path.
    @param kind: what the file holds, as errors say it (C{"token"}).
    @return: the file's first line without its line ending (C{\\n} or
        C{\\r\\n}).
    @raise PasswordFileError: the file does not exist, cannot be read, is a
        directory or not a regular file, is accessible to group or others
        (L{accessibleToOthers}), is larger than L{MAX_PASSWORD_FILE} octets (at
        most that many and one more are ever read), is not UTF-8 text, or
        its first line is empty.
    """
    fd = _open(path, kind)
    try:
        content = _readPrivate(fd, path, kind)
    except OSError as e:
        raise PasswordFileError(f"{kind} file {path} cannot be read: {e.strerror}") from None
    finally:
        os.close(fd)
    return _firstLine(content, path, kind)


# Why a password file cannot be opened, by the error opening it raises.
_OPEN_PROBLEMS: tuple[tuple[type[OSError], str], ...] = (
    (FileNotFoundError, "does not exist"),
    (PermissionError, "cannot be read (permission denied)"),
    (IsADirectoryError, "is a directory"),
)


def describeOpenError(
    error: OSError, problems: tuple[tuple[type[OSError], str], ...]
) -> str:
    """
    Why a file could not be opened: what C{problems} says of the first of
    its errors that C{error} is, else that it cannot be read, and why.
    """
    return next(
        (said for kind, said in problems if isinstance(error, kind)),
        f"cannot be read: {error.strerror}",
    )


def _open(path: str, kind: str) -> int:
    """
    Open the password file C{path} for reading.

    @raise PasswordFileError: it cannot be.
    """
    try:
        # O_NONBLOCK: opening a FIFO by mistake must not hang the daemon;
        # it has no effect on a regular file.
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise PasswordFileError(
            f"{kind} file {path} {describeOpenError(e, _OPEN_PROBLEMS)}"
        ) from None


def _readPrivate(fd: int, path: str, kind: str) -> bytes:
    """
    Read the open password file C{fd}, once L{_checkPrivate} accepts it.

    @raise PasswordFileError: it is refused, or larger than
        L{MAX_PASSWORD_FILE}.
    """
    # fstat after open: the checks apply to the very file read below.
    status = os.fstat(fd)
    _checkPrivate(fd, status.st_mode, path, kind)
    if status.st_size > MAX_PASSWORD_FILE:
        raise _tooLarge(path, kind)
    with os.fdopen(fd, "rb", closefd=False) as f:
        # One octet more than allowed shows a file that grew since.
        content = f.read(MAX_PASSWORD_FILE + 1)
    if len(content) > MAX_PASSWORD_FILE:
        raise _tooLarge(path, kind)
    return content


def _checkPrivate(fd: int, mode: int, path: str, kind: str) -> None:
    """
    Check that the open file C{fd}, of mode C{mode}, is a regular file
    only its owner may read.

    @raise PasswordFileError: it is not.
    """
    if stat.S_ISDIR(mode):
        raise PasswordFileError(f"{kind} file {path} is a directory")
    if not stat.S_ISREG(mode):
        raise PasswordFileError(f"{kind} file {path} is not a regular file")
    if accessibleToOthers(fd, mode):
        raise PasswordFileError(
            f"{kind} file {path} is accessible to group or others"
            f" (mode {stat.S_IMODE(mode):04o}); run: chmod 600 {path}"
        )


def _firstLine(content: bytes, path: str, kind: str) -> str:
    """
    The first line of the password file C{content}, without its line
    ending.

    @raise PasswordFileError: it is empty, or not UTF-8.
    """
    firstLine = content.split(b"\n", 1)[0].removesuffix(b"\r")
    if not firstLine:
        raise PasswordFileError(
            f"{kind} file {path} is empty (the {kind} is its first line)"
        )
    try:
        return firstLine.decode("utf-8")
    except UnicodeDecodeError:
        # The decoder's own message quotes an octet of the password.
        raise PasswordFileError(f"{kind} file {path} is not UTF-8 text") from None


# The POSIX ACL of a file, as Linux stores it in this extended attribute:
# a 4-octet version (2), then 8-octet entries (tag, permissions, id).
_ACL_XATTR = "system.posix_acl_access"
_ACL_VERSION = 2
_ACL_ENTRY = struct.Struct("<HHI")
_ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK = 0x02, 0x04, 0x08, 0x10
# Read or write: execute on a secret gives nothing away.
_ACL_READ_WRITE = 0o6


def accessibleToOthers(fd: int, mode: int) -> bool:
    """
    Whether accounts other than the file's owner (and this process) may
    read or write the open file C{fd} of mode C{mode}.

    Without a POSIX ACL that is any group or other bit (C{mode & 0o077}).
    With one, the group bits of the mode are the ACL's mask, not the
    owning group's permissions: systemd's C{LoadCredential=} writes a
    credential C{0400}, owned by root, and grants the service's user read
    access with an ACL entry where the file system has ACLs (tmpfs), so
    C{stat} shows C{0440} although no group may read it.  Such a file is
    private if no group entry (owning or named) and no named user other
    than this process's effective user is granted read or write under the
    mask, and others have nothing.

    @param fd: the open file.
    @param mode: its C{st_mode}.
    @return: C{True} if the file is not private to its owner (and us).
    """
    if mode & 0o007:
        return True
    if not mode & 0o070:
        return False
    try:
        acl = os.getxattr(fd, _ACL_XATTR)
    except OSError as e:
        if e.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return True
        raise
    return _aclGrantsOthers(acl, os.geteuid())


def _aclGrantsOthers(acl: bytes, us: int) -> bool:
    """
    Whether the POSIX ACL C{acl} (Linux's extended attribute form) grants
    read or write to a group, or to a named user other than C{us}, through
    its mask.  An ACL that cannot be parsed counts as granting.
    """
    header, body = acl[:4], acl[4:]
    if header != struct.pack("<I", _ACL_VERSION) or len(body) % _ACL_ENTRY.size:
        return True
    entries = list(_ACL_ENTRY.iter_unpack(body))
    mask = next((perm for tag, perm, _ in entries if tag == _ACL_MASK), 0o7)
    return any(_grants(tag, who, perm & mask & _ACL_READ_WRITE, us) for tag, perm, who in entries)


def _grants(tag: int, who: int, granted: int, us: int) -> bool:
    """
    Whether an ACL entry (C{tag}, C{who}) granting C{granted} (under the
    mask) lets a group, or a named user other than C{us}, read or write.
    """
    if not granted:
        return False
    return tag in (_ACL_GROUP_OBJ, _ACL_GROUP) or (tag == _ACL_USER and who != us)


def _tooLarge(path: str, kind: str) -> PasswordFileError:
    """
    The error for a password file larger than L{MAX_PASSWORD_FILE}.
    """
    return PasswordFileError(
        f"{kind} file {path} is larger than {MAX_PASSWORD_FILE // 1024} KiB"
        f" ({MAX_PASSWORD_FILE} octets): refused unread (the {kind} is its first line)"
    )


# systemd credentials (moved here from imapmig.access.credentials).

CREDENTIALS_DIRECTORY = "CREDENTIALS_DIRECTORY"
"""
The environment variable in which systemd names the service's
credentials directory (C{/run/credentials/UNIT}).
"""



def isPlainFileName(name: str) -> bool:
    """
    Whether C{name} names a file in a directory, not a path: it has no
    C{/} and no NUL, and is not C{.} or C{..}.
    """
    return not ("/" in name or name in (".", "..") or "\0" in name)


def credentialPath(name: str, environ: Mapping[str, str]) -> str:
    """
    The path of the credential C{name}.

    @param name: the credential's name, as in C{LoadCredential=NAME:...}.
    @param environ: the process's environment.
    @return: C{$CREDENTIALS_DIRECTORY/NAME}.
    @raise CredentialError: C{name} is not a plain file name (it has a
        C{/}, is C{.} or C{..}, or holds a NUL), the variable is not set
        (the daemon does not run under a unit with C{LoadCredential=}), or
        the credential does not exist.
    """
    if not isPlainFileName(name):
        raise CredentialError(
            f"invalid credential name {name!r}: give the NAME of"
            " LoadCredential=NAME:FILE, a file name in $CREDENTIALS_DIRECTORY"
            " without '/' (not '.' or '..')"
        )
    directory = environ.get(CREDENTIALS_DIRECTORY)
    if not directory:
        raise CredentialError(
            f"{CREDENTIALS_DIRECTORY} is not set: imapmig is run outside"
            f" systemd's LoadCredential= (credential {name!r}); run it from"
            f" its unit with LoadCredential={name}:/etc/imapmig/credentials/{name}, or give"
            " a _file key instead of the _credential key"
        )
    path = os.path.join(directory, name)
    if not os.path.lexists(path):
        raise CredentialError(
            f"no credential {name!r} in {directory} ({CREDENTIALS_DIRECTORY}):"
            f" add LoadCredential={name}:FILE (or LoadCredentialEncrypted="
            f"{name}:FILE.cred) to the unit's [Service] section"
        )
    return path


def readCredential(name: str, kind: str, environ: Mapping[str, str]) -> str:
    """
    Read the secret held by the credential C{name}: its first line, with
    the checks of L{readPasswordFile}.

    @param name: the credential's name.
    @param kind: what it holds, as errors say it (C{"password"}).
    @param environ: the process's environment.
    @return: the secret.
    @raise PasswordFileError: the credential cannot be found
        (L{CredentialError}, from L{credentialPath}) or read.
    """
    return readPasswordFile(credentialPath(name, environ), f"{kind} credential")
