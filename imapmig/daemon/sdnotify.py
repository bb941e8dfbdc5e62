# -*- test-case-name: tests.test_sdnotify -*-
"""
systemd's notification protocol (C{sd_notify(3)}), written by hand: one
datagram of C{KEY=VALUE} lines per message to the C{AF_UNIX} socket that
C{$NOTIFY_SOCKET} names (a path, or an abstract name written C{@name}).

A leaf: it imports nothing else of imapmig.  L{Notifier} sends;
L{notifierFromEnvironment} and L{watchdogSeconds} read what systemd puts
in a service's environment; L{unsetNotifyEnvironment} takes it out again,
as libsystemd's C{unset_environment} does, so that the daemon's child
processes (an OAuth2 C{token_command}) do not inherit it: a child that
speaks the protocol itself would otherwise tell systemd it is ready, or
pet the watchdog, in the daemon's name.
"""

from __future__ import annotations

import errno
import re
import socket
import time
from typing import Mapping, MutableMapping

from twisted.logger import Logger

log = Logger()

NOTIFY_SOCKET = "NOTIFY_SOCKET"
WATCHDOG_USEC = "WATCHDOG_USEC"
WATCHDOG_PID = "WATCHDOG_PID"

_KEY = re.compile(r"\A[A-Z][A-Z0-9_]*\Z")


def encodeMessage(fields: Mapping[str, str]) -> bytes:
    """
    The datagram for C{fields}: a C{KEY=VALUE} line per field, in order.

    A value is one line: a line break in it (a C{STATUS=} built from
    configured names) becomes a space, so that it cannot smuggle in a
    second assignment.

    @param fields: e.g. C{{"READY": "1", "STATUS": "3 of 120 jobs done"}}.
    @raise ValueError: a key is not upper-case letters, digits and
        underscores, or there is no field.
    """
    if not fields:
        raise ValueError("a notification needs at least one field")
    lines = []
    for key, value in fields.items():
        if not _KEY.match(key):
            raise ValueError(f"not a notification key: {key!r}")
        flat = value.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
        lines.append(f"{key}={flat}\n")
    return "".join(lines).encode("utf-8")


def socketAddress(value: str) -> str | None:
    """
    The C{AF_UNIX} address C{$NOTIFY_SOCKET} names: a path (absolute), or
    an abstract name (C{@name}, which becomes C{"\\0name"}); L{None} for
    anything else (systemd's C{vsock:} addresses are for virtual machines,
    not services).
    """
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    return None


def monotonicMicroseconds() -> int:
    """
    C{CLOCK_MONOTONIC} in microseconds: the clock systemd reads
    C{MONOTONIC_USEC=} against (a reload's start).  Not the reactor's
    clock, which is wall-clock time.
    """
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


class Notifier:
    """
    Sends notifications to systemd, one datagram each, without ever
    blocking the reactor or raising into the daemon.

    A notification that cannot be sent (the socket gone, its queue full)
    is dropped: the first failure is logged as an error, the next ones
    only once a notification has got through in between, so that a
    watchdog without a listener does not fill the log.

    @ivar description: C{$NOTIFY_SOCKET} as systemd wrote it, for logs.
    """

    def __init__(self, address: str, description: str | None = None) -> None:
        """
        @param address: the socket's C{AF_UNIX} address (L{socketAddress}).
        @param description: how to name it in a log (default: C{address}).
        """
        self._address = address
        self.description = address if description is None else description
        self._socket: socket.socket | None = None
        self._closed = False
        self._failing = False

    def send(self, fields: Mapping[str, str]) -> bool:
        """
        Send one notification.

        @param fields: its assignments (L{encodeMessage}).
        @return: whether it was sent (L{False} after L{close}, or when
            sending failed: logged, see the class).
        """
        if self._closed:
            return False
        data = encodeMessage(fields)
        try:
            self._openSocket().sendto(data, self._address)
        except OSError as e:
            self._failed(e, fields)
            return False
        self._failing = False
        return True

    def _openSocket(self) -> socket.socket:
        """
        The socket to send with, opened the first time.
        """
        if self._socket is None:
            # Non-inheritable (PEP 446) and non-blocking: a full queue
            # at systemd's end drops this notification, never stalls
            # the reactor.
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._socket.setblocking(False)
        return self._socket

    def _failed(self, error: OSError, fields: Mapping[str, str]) -> None:
        """
        Sending C{fields} failed with C{error}: log it, unless the one
        before failed too.
        """
        if self._failing:
            return
        self._failing = True
        log.error(
            "Could not notify systemd through NOTIFY_SOCKET={socket}: {error};"
            " notifications are dropped until one gets through",
            socket=self.description,
            error=error.strerror or errno.errorcode.get(error.errno or 0, str(error)),
            fields=",".join(fields),
        )

    def close(self) -> None:
        """
        Close the socket; nothing is sent after.
        """
        self._closed = True
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def notifierFromEnvironment(environ: Mapping[str, str]) -> Notifier | None:
    """
    The L{Notifier} to C{$NOTIFY_SOCKET} in C{environ}.

    @return: L{None} when it is unset or empty (the daemon was not started
        by systemd as C{Type=notify}), or names no C{AF_UNIX} socket
        (logged as a warning).
    """
    value = environ.get(NOTIFY_SOCKET, "")
    if not value:
        return None
    address = socketAddress(value)
    if address is None:
        log.warn(
            "NOTIFY_SOCKET={socket} names no Unix socket (an absolute path or @name):"
            " systemd is not notified",
            socket=value[:80],
        )
        return None
    return Notifier(address, value)


def watchdogSeconds(environ: Mapping[str, str], pid: int) -> float | None:
    """
    The watchdog timeout systemd gave this process (C{WatchdogSec=}), in
    seconds, as C{sd_watchdog_enabled(3)} reads it.

    @param pid: this process's id: a C{WATCHDOG_PID} naming another
        process means the watchdog is that process's to pet.
    @return: L{None} when C{WATCHDOG_USEC} is unset, or C{WATCHDOG_PID} is
        set to another process; also when either is not a positive integer
        (logged as a warning).
    """
    usec = environ.get(WATCHDOG_USEC, "")
    if not usec:
        return None
    owner = environ.get(WATCHDOG_PID, "")
    timeout = _positive(usec)
    ownerPid = _positive(owner) if owner else pid
    if timeout <= 0 or ownerPid <= 0:
        log.warn(
            "WATCHDOG_USEC={usec} WATCHDOG_PID={owner} are not positive integers:"
            " the watchdog is not petted",
            usec=usec[:40],
            owner=owner[:40],
        )
        return None
    if ownerPid != pid:
        return None
    return timeout / 1_000_000


def _positive(text: str) -> int:
    """
    The integer C{text} says, if it is positive; else 0.
    """
    try:
        value = int(text)
    except ValueError:
        return 0
    return max(value, 0)


def unsetNotifyEnvironment(environ: MutableMapping[str, str]) -> None:
    """
    Remove C{NOTIFY_SOCKET}, C{WATCHDOG_USEC} and C{WATCHDOG_PID} from
    C{environ} (C{os.environ}: what child processes inherit), once read.
    """
    for name in (NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID):
        environ.pop(name, None)
