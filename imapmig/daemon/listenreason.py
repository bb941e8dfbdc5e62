# -*- test-case-name: tests.test_listenreason -*-
"""
Why the status listener could not listen, in words an admin can act on.

Twisted's own message is clear for a TCP port (C{Couldn't listen on
127.0.0.1:8025: [Errno 98] Address already in use.}) but not for a UNIX
socket: a missing directory reads C{[Errno 2] No such file or directory:
'4242' -> b'/run/imapmig/status.sock.lock'} (the lock file's symlink, from
the process id) or C{Couldn't listen on any:b'/run/imapmig/status.sock'}.
"""

from __future__ import annotations

import errno
import os

from twisted.internet.error import CannotListenError
from twisted.python.failure import Failure

__all__ = ["listenFailureReason", "shortListenReason"]


def listenFailureReason(failure: Failure) -> str:
    """
    The reason C{failure} (of an endpoint's C{listen}) gives, naming the
    path for a UNIX socket and, where the error says it, what to check.

    @return: one line, without the endpoint's description.
    """
    error = failure.value
    if isinstance(error, CannotListenError) and isinstance(error.port, (bytes, str)):
        path = os.fsdecode(error.port)
        return f"Couldn't listen on {path}: {_socketReason(error.socketError, path)}"
    if isinstance(error, OSError) and error.filename2 is not None:
        # FilesystemLock's symlink (the UNIX socket's lock file): the
        # first name is the process id, the link's content.
        path = os.fsdecode(error.filename2)
        return f"cannot create the lock file {path}: {_describe(error, path)}"
    return failure.getErrorMessage()


def shortListenReason(failure: Failure) -> str:
    """
    The reason C{failure} gives in a few words, the operating system's
    (C{Address already in use}, C{Permission denied}, C{No such file or
    directory}), for a report that is cut short.
    """
    error = failure.value
    if isinstance(error, CannotListenError):
        error = error.socketError
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) if isinstance(error, (str, Exception)) else failure.getErrorMessage()


def _socketReason(cause: object, path: str) -> str:
    """
    Why the UNIX socket at C{path} could not listen: C{cause}, the
    L{CannotListenError}'s C{socketError}, in words.
    """
    if isinstance(cause, OSError):
        return _describe(cause, path)
    if cause == "Cannot acquire lock":
        return f"its lock file {path}.lock is held by another running process"
    return f"{cause}"


# What to check when creating a file fails with an errno, the directory
# filled in.
_HINTS = {
    errno.ENOENT: "the directory {} does not exist",
    errno.EACCES: "no permission to create files in {}",
    errno.EPERM: "no permission to create files in {}",
}


def _describe(error: OSError, path: str) -> str:
    """
    C{[Errno N] text} of C{error}, met creating C{path}, with a hint.
    """
    if error.errno is None:
        # No errno: Python's own refusal (an AF_UNIX path too long).
        return str(error)
    text = f"[Errno {error.errno}] {error.strerror}"
    hint = _HINTS.get(error.errno)
    if hint is None:
        return text
    return f"{text} ({hint.format(os.path.dirname(path) or '.')})"
