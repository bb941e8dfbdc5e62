"""
L{imapmig.daemon.listenreason}: why the status listener could not listen, from
the very errors Twisted raises for a UNIX socket (its lock file, its bind)
and a TCP port, and in the critical line L{ListenerService} logs.
"""

from __future__ import annotations

import os
import socket
import tempfile
import traceback

from twisted.internet.defer import fail
from twisted.internet.error import CannotListenError
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.python.failure import Failure
from twisted.python.lockfile import FilesystemLock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.daemon.listener import ListenerService, listenerFailed
from imapmig.errors import StatusListenerFailed
from imapmig.daemon.listenreason import listenFailureReason, shortListenReason
from tests.test_sdnotify import _Endpoint


def _lockFailure(path: str) -> Failure:
    """
    What Twisted's UNIX port raises when it cannot create the lock file of
    C{path} (it takes the lock before it binds).
    """
    try:
        FilesystemLock(path.encode() + b".lock").lock()
    except OSError:
        return Failure()
    raise AssertionError(f"{path}.lock was created")


def _bindFailure(path: str) -> Failure:
    """
    What Twisted's UNIX port raises when it cannot bind C{path}
    (C{lockfile=0}).
    """
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.bind(path.encode())
        except OSError as e:
            return Failure(CannotListenError(None, path.encode(), e))
    raise AssertionError(f"{path} was bound")


class ListenFailureReasonTests(SynchronousTestCase):
    """
    L{listenFailureReason}.
    """

    def setUp(self) -> None:
        # Short enough for an AF_UNIX address (108 octets), unlike mktemp's.
        base = tempfile.mkdtemp()
        self.addCleanup(os.rmdir, base)
        self.missing = os.path.join(base, "run")
        self.path = os.path.join(self.missing, "status.sock")

    def test_lockFileDirectoryMissing(self) -> None:
        """
        A UNIX socket in a directory that does not exist (its lock file
        fails first): the lock file and the missing directory are named,
        not the process id the lock's symlink points to.
        """
        reason = listenFailureReason(_lockFailure(self.path))
        self.assertEqual(
            reason,
            f"cannot create the lock file {self.path}.lock: [Errno 2] No such file or"
            f" directory (the directory {self.missing} does not exist)",
        )
        self.assertNotIn(str(os.getpid()), reason)

    def test_bindDirectoryMissing(self) -> None:
        """
        Without a lock file (C{lockfile=0}), the bind fails: the socket's
        path is named as a path (not C{any:b'...'}), with the directory.
        """
        self.assertEqual(
            listenFailureReason(_bindFailure(self.path)),
            f"Couldn't listen on {self.path}: [Errno 2] No such file or directory"
            f" (the directory {self.missing} does not exist)",
        )

    def test_pathTooLong(self) -> None:
        """
        A socket path longer than an AF_UNIX address holds: Python's words,
        the path named as a path.
        """
        path = "/" + "x" * 200 + "/status.sock"
        self.assertEqual(
            listenFailureReason(_bindFailure(path)),
            f"Couldn't listen on {path}: AF_UNIX path too long",
        )

    def test_lockHeld(self) -> None:
        """
        A lock file held by a live process (another daemon on the same
        socket) is said so.
        """
        failure = Failure(CannotListenError(None, b"/run/x.sock", "Cannot acquire lock"))
        self.assertEqual(
            listenFailureReason(failure),
            "Couldn't listen on /run/x.sock: its lock file /run/x.sock.lock is held by"
            " another running process",
        )

    def test_permissionDenied(self) -> None:
        """
        A directory the daemon may not write in is named as such.
        """
        error = PermissionError(13, "Permission denied", "4242", None, b"/run/x.sock.lock")
        self.assertEqual(
            listenFailureReason(Failure(error)),
            "cannot create the lock file /run/x.sock.lock: [Errno 13] Permission denied"
            " (no permission to create files in /run)",
        )

    def test_tcpUnchanged(self) -> None:
        """
        A TCP port keeps Twisted's message, which names the address.
        """
        error = CannotListenError("127.0.0.1", 8025, OSError(98, "Address already in use"))
        self.assertEqual(
            listenFailureReason(Failure(error)),
            "Couldn't listen on 127.0.0.1:8025: [Errno 98] Address already in use.",
        )


class CriticalLineTests(SynchronousTestCase):
    """
    The critical line of a status listener that cannot listen on a UNIX
    socket.
    """

    def test_criticalLineNamesTheDirectory(self) -> None:
        """
        The start fails with L{StatusListenerFailed} after one critical
        line naming the endpoint, the lock file and the missing directory.
        """
        missing = os.path.join(os.path.abspath(self.mktemp()), "run")
        path = os.path.join(missing, "status.sock")
        service = ListenerService(
            _Endpoint(fail(_lockFailure(path))),  # type: ignore[arg-type]
            Factory.forProtocol(Protocol),
            f"unix:{path}",
        )
        with capturedLogs() as events:
            self.assertRaises(StatusListenerFailed, service.privilegedStartService)
        [event] = events
        self.assertEqual(event["log_level"], LogLevel.critical)
        self.assertEqual(
            formatEvent(event),
            f"The status listener could not listen on unix:{path}: cannot create the lock"
            f" file {path}.lock: [Errno 2] No such file or directory (the directory"
            f" {missing} does not exist)",
        )


class ShortListenReasonTests(SynchronousTestCase):
    """
    L{imapmig.daemon.listenreason.shortListenReason} and the text of
    L{StatusListenerFailed}, which a daemonizing twistd cuts at 100
    octets.
    """

    def test_reasonFirst(self) -> None:
        """
        The operating system's words come first, the endpoint after: a
        port in use fits twistd's report whole.
        """
        error = CannotListenError("127.0.0.1", 8025, OSError(98, "Address already in use"))
        failed = listenerFailed("tcp:8025:interface=127.0.0.1", Failure(error))
        self.assertEqual(str(failed), "Address already in use (tcp:8025:interface=127.0.0.1)")
        line = "".join(traceback.format_exception_only(type(failed), failed)).strip()
        report = f"1 {line}".encode()
        self.assertTrue(report.startswith(b"1 imapmig.daemon.StatusListenerFailed: "), report)
        self.assertLessEqual(len(report), 100)

    def test_lockFile(self) -> None:
        """
        A UNIX socket's lock file that cannot be created: its error's
        words, not the process id of the lock's symlink.
        """
        path = os.path.join(tempfile.mkdtemp(), "run", "status.sock")
        self.addCleanup(os.rmdir, os.path.dirname(os.path.dirname(path)))
        failed = listenerFailed(f"unix:{path}", _lockFailure(path))
        self.assertEqual(str(failed), f"No such file or directory (unix:{path})")

    def test_lockHeld(self) -> None:
        """
        A lock held by another process: Twisted's words.
        """
        error = CannotListenError(None, b"/run/x.sock", "Cannot acquire lock")
        self.assertEqual(shortListenReason(Failure(error)), "Cannot acquire lock")
